"""The fit model's GPU offload plan for llama.cpp on a discrete GPU of any vendor, against
numbers worked out by hand (docs/notes/fit-model.md, "GPU offload"), for three registry
models at a 4,096-token context in f16: Qwen2.5-Coder 1.5B (28 layers, tied embeddings),
Llama 3.1 8B (32 layers) and Qwen2.5-Coder 14B (48 layers).

The rule (llama-cpp-python 0.3.36's llama.cpp, src/llama-model.cpp load_tensors):
n_gpu_layers = n + 1 puts the output layer and the LAST n repeating layers, with their KV
cache, on the GPU; the token embedding stays in RAM. GPU bytes with n layers:
    output + n x layer + n x KV a layer + compute buffer, where the compute buffer is
    max(512 x (vocab + 2 x hidden) x 4 logits, 512 x (3 x ffn + 2 x hidden) x 4 activations)
    + 512 x 2 x ctx (the f16 mask); measured on lavapipe (docs/notes/fit-model.md)
Weights without the file: output = vocab x hidden at Q6_K's 6.5625 bits (8.5 for Q8_0: the
type llama.cpp's quantize gives it), embedding = vocab x hidden x (file bytes / parameters)
(tied: the output's); layer = (file - embedding - output if untied) / layers.
GPU budget: 0.95 x free - 400 MiB."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from app import hardware
from app.fit import estimate, recommend
from app.fit.base import Fit, budgets
from app.fit.estimate import layer_choices, plan_load
from app.fit.gpu_layer_choices import gpu_layer_choices
from app.gguf_file import read_gguf
from app.hardware import GPU, HardwareProfile
from app.registry import ModelSpec, load_registry
from tests.support.machines import M2_AIR_16GB, profile

GiB = 2**30
MiB = 2**20
CTX = 4096


def card(vendor: str, name: str, total_gib: int, free: float, bandwidth: float | None
         ) -> HardwareProfile:
    """A desktop (8 cores, 32 GiB with 24 GB available: RAM budget 21.6 GB, 50 GB/s) with
    one discrete GPU."""
    return profile(32 * GiB, 24e9, 8, 50,
                   (GPU(name, vendor, total_gib * GiB, int(free), None, bandwidth),))


# budgets: 0.95 x free - 419,430,400 B
ARC_8GB = card("intel", "Intel Arc A750", 8, 8.0e9, 512)  # 7,180,569,600 B
RX_12GB = card("amd", "AMD Radeon RX 6700 XT", 12, 12.0e9, 384)  # 10,980,569,600 B
RTX_24GB = card("nvidia", "NVIDIA GeForce RTX 3090", 24, 24.0e9, 936)  # 22,380,569,600 B
BUSY_8GB = card("nvidia", "NVIDIA GeForce RTX 4060", 8, 1.0e9, 272)  # 530,569,600 B (a game)
LESS_BUSY_8GB = card("nvidia", "NVIDIA GeForce RTX 4060", 8, 1.1e9, 272)  # 625,569,600 B


def spec(model_id: str) -> ModelSpec:
    return load_registry().get(model_id)


def fit(model_id: str, quant: str, hw: HardwareProfile) -> Fit:
    s = spec(model_id)
    variant = next(v for v in s.variants if v.format == "gguf" and v.quant == quant)
    return estimate(s.id, s.arch, s.params, variant, hw, CTX)


def test_budgets_of_the_three_cards_and_any_vendor():
    assert budgets(ARC_8GB) == (7_180_569_600, 21_600_000_000, "intel")
    assert budgets(RX_12GB)[::2] == (10_980_569_600, "amd")
    assert budgets(RTX_24GB)[::2] == (22_380_569_600, "nvidia")
    # an unknown Vulkan device is a discrete GPU like the others
    assert budgets(card("moore", "MTT S80", 16, 16.0e9, None))[::2] == (14_780_569_600, "moore")


# Qwen2.5-Coder 1.5B Q4_K_M: 1,117,320,768 B, 1,543,714,304 parameters, tied.
# embedding = int(151,936 x 1,536 x 6.5625 / 8) = 191,439,360 (also the output's copy on the
# GPU); layer = (1,117,320,768 - 191,439,360) / 28 = 33,067,193.14;
# KV a layer: 2 x 2 heads x 128 x 2 B x 4,096 = 4,194,304; buffer 512 x (151,936 + 3,072) x 4
# = 317,456,384 (over 512 x (26,880 + 3,072) x 4 = 61,341,696) + 4,194,304 = 321,650,688.
# All 28: 191,439,360 + 925,881,408 + 117,440,512 + 321,650,688 = 1,556,411,968.
Q15_FULL = 1_556_411_968


@pytest.mark.parametrize("hw", [ARC_8GB, RX_12GB, RTX_24GB], ids=["8GB", "12GB", "24GB"])
def test_the_1_5b_is_fully_offloaded_on_every_card(hw):
    f = fit("qwen2.5-coder-1.5b-instruct", "Q4_K_M", hw)
    assert (f.placement, f.gpu_layers, f.n_gpu_layers) == ("full_gpu", 28, -1)
    assert f.gpu_bytes == Q15_FULL
    assert f.headroom_bytes == budgets(hw)[0] - Q15_FULL


def test_a_card_with_1_1_gb_free_takes_the_output_and_three_layers_of_the_1_5b():
    # 3 layers: 191,439,360 + 99,201,579 + 12,582,912 + 321,650,688 = 624,874,539 <= 625,569,600;
    # 4 layers: 662,136,037 > the budget; with 1 GB free (530,569,600) not even one layer
    # (550,351,545) fits
    f = fit("qwen2.5-coder-1.5b-instruct", "Q4_K_M", LESS_BUSY_8GB)
    assert (f.placement, f.gpu_layers, f.n_gpu_layers) == ("partial", 3, 4)
    assert f.gpu_bytes == 624_874_539
    assert fit("qwen2.5-coder-1.5b-instruct", "Q4_K_M", BUSY_8GB).placement == "cpu"


# Llama 3.1 8B (8,030,261,248 parameters, untied): embedding = int(128,256 x 4,096 x size /
# params), output = int(128,256 x 4,096 x bits / 8); layer = (size - both) / 32; KV a layer
# 2 x 8 x 128 x 2 B x 4,096 = 16,777,216 (536,870,912 for 32); buffer 512 x (128,256 + 8,192)
# x 4 = 279,445,504 (activations: 512 x 51,200 x 4 = 104,857,600) + 4,194,304 = 283,639,808.
#   Q6_K 6,585,000,000: embedding 430,788,145, output 430,940,160, layer 178,852,240.47; all
#     32: 430,940,160 + 5,723,271,695 + 536,870,912 + 283,639,808 = 6,974,722,575 (= the file
#     less the embedding + KV + buffer)
#   Q8_0 8,532,000,000: embedding 558,160,130, output 558,170,112, layer 231,739,679.94; all
#     32: 8,794,350,590; 25 layers: 558,170,112 + 5,793,491,998 + 419,430,400 + 283,639,808 =
#     7,054,732,318; 26: 7,303,249,214
@pytest.mark.parametrize("hw", [ARC_8GB, RX_12GB, RTX_24GB], ids=["8GB", "12GB", "24GB"])
def test_the_8b_q6_k_is_fully_offloaded_from_8_gb(hw):
    f = fit("llama-3.1-8b-instruct", "Q6_K", hw)
    assert (f.placement, f.gpu_layers, f.gpu_bytes) == ("full_gpu", 32, 6_974_722_575)


def test_the_8b_q8_0_takes_25_of_32_layers_on_an_8_gb_card():
    f = fit("llama-3.1-8b-instruct", "Q8_0", ARC_8GB)
    assert (f.placement, f.gpu_layers, f.n_gpu_layers) == ("partial", 25, 26)
    assert f.gpu_bytes == 7_054_732_318
    assert f.explain().startswith(
        "partial offload (25/32 layers on GPU): 8.53 GB weights + 0.54 GB KV at 4k context + "
        "0.41 GB buffers (7.05 GB of it on the GPU); ~12 tokens/s")
    # RAM: embedding 558,160,130 + 7 layers 1,622,177,760 + 7 x 16,777,216 KV + 5 MiB + 112 MiB
    assert f.headroom_bytes == 21_600_000_000 - 2_420_461_794
    # decode at 1,024 tokens of KV (4,194,304 B a layer): GPU reads 558,170,112 +
    # 25 x (231,739,679.94 + 4,194,304) = 6,456,519,711 B at 0.75 x 512 GB/s; the CPU 7 x the
    # same = 1,651,537,888 B at 0.50 x 50 GB/s: 16.81 + 66.06 ms = 12.1 tokens/s
    assert f.decode_tokens_per_s == pytest.approx(12.1, abs=0.05)
    for hw in (RX_12GB, RTX_24GB):
        assert fit("llama-3.1-8b-instruct", "Q8_0", hw).gpu_bytes == 8_794_350_590


def test_a_card_with_1_gb_free_runs_the_8b_on_the_cpu():
    # one layer would take 558,170,112 + 231,739,680 + 16,777,216 + 283,639,808 = 1,090,326,816
    # > 530,569,600
    f = fit("llama-3.1-8b-instruct", "Q8_0", BUSY_8GB)
    assert (f.placement, f.gpu_layers, f.n_gpu_layers, f.gpu_bytes) == ("cpu", 0, 0, 0)


# Qwen2.5-Coder 14B (14,770,033,664 parameters, 48 layers, untied, vocab 152,064, hidden
# 5,120, ffn 13,824): KV a layer 16,777,216 (805,306,368 for 48); buffer 512 x (152,064 +
# 10,240) x 4 = 332,398,592 (activations 105,906,176) + 4,194,304 = 336,592,896.
# output at Q6_K: int(152,064 x 5,120 x 6.5625 / 8) = 638,668,800 (Q8_0: 827,228,160)
#   Q4_K_M 9,047,000,000: embedding 476,891,384, layer 165,238,329.5; all 48: 9,712,007,880;
#     34 layers: 638,668,800 + 5,618,103,203 + 570,425,344 + 336,592,896 = 7,163,790,243; 35:
#     7,345,805,788
#   Q6_K 12,111,000,000: embedding 638,402,957, layer 225,706,838.40; 41 layers: 638,668,800
#     + 9,253,980,374 + 687,865,856 + 336,592,896 = 10,917,107,926; 42: 11,159,591,981;
#     25 layers: 7,037,363,056; 26: 7,279,847,110; all 48: 12,614,496,307
#   Q8_0 15,693,000,000: embedding 827,219,685, layer 292,469,836.56; 31 layers:
#     10,750,479,685 (32: 11,059,726,738); 19 layers: 7,039,515,055 (20: 7,348,762,107)
@pytest.mark.parametrize(("quant", "hw", "layers", "gpu_bytes"), [
    ("Q4_K_M", ARC_8GB, 34, 7_163_790_243),
    ("Q4_K_M", RX_12GB, 48, 9_712_007_880),
    ("Q6_K", ARC_8GB, 25, 7_037_363_056),
    ("Q6_K", RX_12GB, 41, 10_917_107_926),
    ("Q6_K", RTX_24GB, 48, 12_614_496_307),
    ("Q8_0", ARC_8GB, 19, 7_039_515_055),
    ("Q8_0", RX_12GB, 31, 10_750_479_685),
], ids=lambda x: x if isinstance(x, str | int) else "")
def test_the_14b_offload_plans(quant, hw, layers, gpu_bytes):
    f = fit("qwen2.5-coder-14b-instruct", quant, hw)
    assert (f.gpu_layers, f.gpu_bytes) == (layers, gpu_bytes)
    assert f.placement == ("full_gpu" if layers == 48 else "partial")


def test_a_16_gb_mac_keeps_unified_memory_all_or_nothing():
    # budget min(0.67 x 16 GiB, 0.9 x 12 GB) = 10.8 GB for the whole model: weights + KV +
    # GPU buffer + 112 MiB (117,440,512)
    q15 = fit("qwen2.5-coder-1.5b-instruct", "Q4_K_M", M2_AIR_16GB)
    assert (q15.placement, q15.gpu_bytes) == (
        "full_gpu", 1_117_320_768 + 117_440_512 + 316_407_808 + 117_440_512)
    l8 = fit("llama-3.1-8b-instruct", "Q6_K", M2_AIR_16GB)
    assert (l8.placement, l8.gpu_bytes) == (
        "full_gpu", 6_585_000_000 + 536_870_912 + 267_911_168 + 117_440_512)
    # 14B Q4_K_M: 9,047,000,000 + 805,306,368 + 316,669,952 + 117,440,512 = 10,286,416,832
    q14 = fit("qwen2.5-coder-14b-instruct", "Q4_K_M", M2_AIR_16GB)
    assert (q14.placement, q14.headroom_bytes) == ("full_gpu", 10_800_000_000 - 10_286_416_832)
    # Q6_K: 13.35 GB on the GPU, 13.04 GB on the CPU: neither fits, no partial plan on a Mac
    assert fit("qwen2.5-coder-14b-instruct", "Q6_K", M2_AIR_16GB).placement == "wont_fit"


def test_a_12_gb_amd_card_gets_the_8b_fully_offloaded():
    # every variant fits all 32 layers; all decode above 20 tokens/s, so quality wins among
    # those leaving 10% of the budget: Q8_0, 8,794,350,590 of 10,980,569,600 (20% free)
    f = recommend(spec("llama-3.1-8b-instruct"), RX_12GB)
    assert (f.quant, f.placement, f.gpu_layers) == ("Q8_0", "full_gpu", 32)
    # decode: 558,170,112 + 32 x (231,739,679.94 + 4,194,304) = 8,108,057,600 B at
    # 0.75 x 384 GB/s = 35.5 tokens/s
    assert f.decode_tokens_per_s == pytest.approx(35.5, abs=0.05)
    # on the 8 GB card Q6_K leaves 0.21 GB (under 10%), Q8_0's 25 layers decode at 12
    # tokens/s: Q5_K_M, fully offloaded
    f8 = recommend(spec("llama-3.1-8b-instruct"), ARC_8GB)
    assert (f8.quant, f8.placement) == ("Q5_K_M", "full_gpu")


MODELS = [("qwen2.5-coder-1.5b-instruct", "Q4_K_M"), ("llama-3.1-8b-instruct", "Q4_K_M"),
          ("llama-3.1-8b-instruct", "Q8_0"), ("qwen2.5-coder-14b-instruct", "Q6_K"),
          ("qwen2.5-coder-14b-instruct", "Q8_0")]


def by_hand(model_id: str, quant: str, n: int) -> int:
    """GPU bytes with n layers offloaded, from the docstring's formula."""
    s = spec(model_id)
    a = s.arch
    size = next(v.size_bytes for v in s.variants if v.quant == quant and v.format == "gguf")
    output = int(a.vocab * a.hidden * (8.5 if quant == "Q8_0" else 6.5625) / 8)
    embedding = output if a.tied_embeddings else int(a.vocab * a.hidden * size / s.params)
    layer = (size - embedding - (0 if a.tied_embeddings else output)) / a.layers
    kv = 2 * a.kv_heads * a.head_dim * 2 * CTX
    buffer = 512 * 4 * max(a.vocab + 2 * a.hidden, 3 * a.ffn + 2 * a.hidden) + 512 * 2 * CTX
    return output + round(n * layer) + n * kv + buffer


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "intel", "other"])
def test_an_offload_plan_never_exceeds_the_cards_memory(vendor):
    for free_mb in range(300, 30_000, 97):  # 300 MB to 30 GB free
        hw = card(vendor, "GPU", 32, free_mb * 1e6, 500)
        budget = budgets(hw)[0]
        for model_id, quant in MODELS:
            f = fit(model_id, quant, hw)
            if f.placement == "cpu":
                assert f.gpu_bytes == 0 and by_hand(model_id, quant, 1) > budget
                continue
            assert f.gpu_bytes == by_hand(model_id, quant, f.gpu_layers) <= budget
            assert f.gpu_bytes + (400 << 20) <= free_mb * 1e6  # the driver's share kept
            if f.placement == "partial":  # the most layers that fit
                assert by_hand(model_id, quant, f.gpu_layers + 1) > budget


def test_the_output_layer_goes_to_the_gpu_with_the_first_layer_and_the_embedding_never():
    # Llama 8B Q4_K_M: output 430,940,160 B, layer 130,195,649.03, KV 16,777,216, buffer
    # 283,639,808. llama.cpp offloads the output first (n_gpu_layers = 1 + layers)
    f = fit("llama-3.1-8b-instruct", "Q4_K_M", card("amd", "GPU", 2, 2.0e9, 300))
    # budget 0.95 x 2e9 - 419,430,400 = 1,480,569,600; 6 layers: 430,940,160 + 781,173,894 +
    # 100,663,296 + 283,639,808 = 1,596,417,158 is over it; 5: 1,449,444,293
    assert (f.gpu_layers, f.n_gpu_layers, f.gpu_bytes) == (5, 6, 1_449_444_293)
    assert f.gpu_bytes - 5 * (130_195_649 + 16_777_216) - 283_639_808 == 430_940_160
    # the whole model: 4,919,000,000 - 321,799,071 (embedding, in RAM) + 536,870,912 +
    # 267,911,168
    full = fit("llama-3.1-8b-instruct", "Q4_K_M", RTX_24GB)
    assert full.gpu_bytes == 4_919_000_000 - 321_799_071 + 536_870_912 + 283_639_808


def write_model(path: Path) -> Path:
    """A 2-layer llama GGUF: token_embd and output.weight of 1,000 x 64 float32 (256,000 B
    each) and 2 layers of 64 x 64 float32 (16,384 B each), vocabulary 1,000."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_token_list([f"t{i}".encode() for i in range(1000)])
    w.add_tensor("token_embd.weight", np.zeros((1000, 64), dtype=np.float32))
    w.add_tensor("output.weight", np.zeros((1000, 64), dtype=np.float32))
    for il in range(2):
        w.add_tensor(f"blk.{il}.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_load_plan_asks_llama_cpp_for_the_output_layer_and_the_offloaded_ones(tmp_path):
    info = read_gguf(write_model(tmp_path / "m.gguf"))
    assert info.output == ("F32", 256_000) and info.embedding == ("F32", 256_000)
    # at 512 tokens: KV a layer 2 x 4 heads x 16 x 2 B x 512 = 131,072; buffer 512 x (1,000 +
    # 128) x 4 + 512 x 2 x 512 = 2,834,432. One layer: 256,000 + 16,384 + 131,072 + 2,834,432 =
    # 3,237,888; two: 3,385,344. A budget of 3,300,000 (free (3,300,000 + 419,430,400) / 0.95)
    hw = card("intel", "GPU", 1, (3_300_000 + 419_430_400) / 0.95 + 1, 100)
    plan = plan_load(info, hw, context=512)
    assert plan.gpu_layers == 2  # llama.cpp's n_gpu_layers: the output layer + 1 of 2
    assert plan.reason.startswith("partial offload (1/2 layers on GPU)")
    assert plan_load(info, RTX_24GB, context=512).gpu_layers == -1
    # the window's GPU layers setting: each choice with its memory and speed
    # (a layer's bytes are the file's less the embedding and output: its 12,480 bytes of
    # header and padding are spread over the 2 layers, 6,240 each)
    assert info.file_size - info.data_bytes == 12_480
    choices = layer_choices(info, hw, 512)
    assert [(f.placement, f.n_gpu_layers, f.gpu_bytes) for f in choices] == [
        ("cpu", 0, 0), ("partial", 2, 3_237_888 + 6_240), ("wont_fit", 0, 3_385_344 + 12_480)]
    # as the window lists them: most layers first, in llama.cpp's n_gpu_layers, the plan's
    # pick marked, and what will not fit not to be picked
    listed = gpu_layer_choices(info, hw, 512)
    assert [(c.value, c.fits, c.planned) for c in listed] == [
        (3, False, False), (2, True, True), (0, True, False)]
    assert listed[0].label.startswith("all 2 layers: will not fit (needs 0.00 GB")
    speeds = [f"~{f.decode_tokens_per_s:.0f} tokens/s" for f in choices]
    assert listed[1].label == f"1 of 2 layers: 0.00 GB on the GPU, {speeds[1]} (the plan's choice)"
    assert listed[2].label == f"none: the CPU alone: {speeds[0]}"


def test_the_speed_of_each_layer_count_a_user_may_choose():
    # the GPU layers setting's choices on the 8 GB card for the 8B Q8_0: more layers, faster,
    # up to the 25 that fit; 26 (7,303,249,214 B > 7,180,569,600) will not fit
    s = spec("llama-3.1-8b-instruct")
    q8 = next(v for v in s.variants if v.quant == "Q8_0")
    speeds = [estimate(s.id, s.arch, s.params, q8, ARC_8GB, CTX, gpu_layers=n)
              for n in range(0, 33)]
    assert [f.placement for f in speeds] == ["cpu"] + ["partial"] * 25 + ["wont_fit"] * 7
    decode = [f.decode_tokens_per_s for f in speeds[:26]]
    assert decode == sorted(decode) and decode[25] == pytest.approx(12.1, abs=0.05)
    assert speeds[26].headroom_bytes == 7_180_569_600 - 7_303_249_214
    assert speeds[12].n_gpu_layers == 13


def test_an_integrated_gpu_shares_the_ram_all_or_nothing():
    # ggml's IGPU device type: app.hardware.GPU.shared_memory
    hw = profile(16 * GiB, 12e9, 8, 60,
                 (GPU("Intel Iris Xe", "intel", 8 * GiB, 8 * GiB, None, None,
                      shared_memory=True),))
    assert budgets(hw) == (8 * GiB, 10_800_000_000, "unified")
    f = fit("llama-3.1-8b-instruct", "Q4_K_M", hw)
    # 4,919,000,000 + 536,870,912 + 267,911,168 + 117,440,512 = 5,841,222,592 of 8 GiB, at the
    # RAM's bandwidth (60 GB/s x 0.75)
    assert (f.placement, f.gpu_bytes) == ("full_gpu", 5_841_222_592)
    assert f.decode_tokens_per_s == pytest.approx(
        45e9 / (4_919_000_000 - 321_799_071 + 134_217_728), abs=0.05)
    # the 14B Q4_K_M: 10,286,416,832 B > 8 GiB for the GPU; 9,974,989,760 on the CPU (5 MiB
    # of buffers) fits 10.8 GB of RAM
    assert fit("qwen2.5-coder-14b-instruct", "Q4_K_M", hw).placement == "cpu"


def test_an_output_layer_over_a_vulkan_devices_buffer_range_stays_on_the_cpu():
    # lavapipe's maxStorageBufferRange is 128 MiB: ggml-vulkan refuses the output matmul (the
    # 1.5B's output, 191,439,360 B, and its logits, 512 x 151,936 x 4 = 311,164,928 B, are
    # over it), so the output and its logits stay in RAM. Measured there with the real files:
    # docs/notes/fit-model.md, "GPU offload"; app.hardware sets it for lavapipe
    # (MAX_STORAGE_BUFFER).
    hw = profile(32 * GiB, 24e9, 8, 50,
                 (GPU("llvmpipe", "lavapipe", 2 * GiB, 2 * GiB, None, 50,
                      max_tensor_bytes=hardware.MAX_STORAGE_BUFFER["lavapipe"]),))
    f = fit("qwen2.5-coder-1.5b-instruct", "Q4_K_M", hw)
    # all 28 layers: 925,881,408 + 117,440,512 KV + 512 x (3 x 8,960 + 2 x 1,536) x 4 =
    # 61,341,696 activations + 4,194,304 mask
    assert (f.placement, f.gpu_bytes) == ("full_gpu", 925_881_408 + 117_440_512 + 65_536_000)
    # the buffers: the GPU's and, in RAM (pinned by the GPU backend), the output's logits
    # 512 x (151,936 + 3,072) x 4 (measured: 60.51 and 302.75 MiB at 2k context)
    assert f.memory.buffers == 65_536_000 + 317_456_384


def test_two_cards_split_the_layers_and_their_budgets_add_up():
    # llama.cpp's default layer split puts the offloaded layers on every GPU in proportion to
    # its free memory: two 8 GB Arcs hold the 8B at Q8_0 that one holds 25 of 32 layers of
    arc = ARC_8GB.gpus[0]
    two = profile(32 * GiB, 24e9, 8, 50, (arc, arc))
    assert budgets(two)[::2] == (2 * 7_180_569_600, "intel")
    f = fit("llama-3.1-8b-instruct", "Q8_0", two)
    # one card's full plan (8,794,350,590) and the second card's compute buffer: a ubatch of
    # activations 512 x (3 x 14,336 + 2 x 4,096) x 4 = 104,857,600 + the mask 512 x 2 x 4,096
    assert (f.placement, f.n_gpu_layers, f.gpu_bytes) == ("full_gpu", -1,
                                                          8_794_350_590 + 109_051_904)
    # a busy second card adds what it has free
    busy = profile(32 * GiB, 24e9, 8, 50, (arc, BUSY_8GB.gpus[0]))
    assert budgets(busy)[0] == 7_180_569_600 + 530_569_600
    partial = fit("llama-3.1-8b-instruct", "Q8_0", busy)
    assert partial.placement == "partial" and partial.gpu_bytes <= budgets(busy)[0]
