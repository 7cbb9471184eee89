"""What the model picker and the Ctrl+K switcher list: each model with where it runs and its
fit badge for this machine (the same fit labels and colors as the Models page)."""

from __future__ import annotations

from dataclasses import dataclass

from app.fit import Fit, fits_for
from app.gui.catalog_page import BADGE_COLOR
from app.hardware import HardwareProfile
from app.registry import load_registry
from app.store import InstalledModel
from backends.errors import EmberError


@dataclass(frozen=True)
class ModelChoice:
    ref: str  # what the Runtime is asked for (MODEL:QUANT, or ENDPOINT/model)
    where: str  # the backend that runs it here, or "remote"
    fit: str = ""  # the fit label ("full GPU", "CPU", ...); "" where none is known
    color: str = ""  # the badge's color
    detail: str = ""  # the fit's explanation (memory parts, speed)
    vision: bool = False  # it has a projector: it takes images

    @property
    def text(self) -> str:
        return "  ·  ".join(part for part in (self.ref, self.where,
                                              "vision" if self.vision else "", self.fit)
                            if part)


def installed_fit(model: InstalledModel, hardware: HardwareProfile,
                  context: int | None = None, n_gpu_layers: int | None = None) -> Fit | None:
    """The fit of an installed registry model's own variant, at the context and llama.cpp
    GPU layers it will load with (None: the plan's); None for an imported file the registry
    does not know (its fit shows when it loads, in the load plan)."""
    try:
        spec = load_registry().get(model.id)
    except EmberError:
        return None
    return next((f for f in fits_for(spec, hardware, context, n_gpu_layers=n_gpu_layers,
                                      projectors=model.projector is not None)
                 if f.quant == model.quant and f.format == model.format), None)


def local_choice(model: InstalledModel, where: str, why: str = "", *,
                 hardware: HardwareProfile, context: int | None = None,
                 n_gpu_layers: int | None = None) -> ModelChoice:
    """`where`: the backend that runs it here; `why`: the backend choice's reason, shown with
    the fit in the picker's tooltip; `context`, `n_gpu_layers`: the load settings the user
    gave it (app.presets.load_options), so the badge says what loading it will do."""
    fit = installed_fit(model, hardware, context,
                        n_gpu_layers if where == "llamacpp" else None)
    reason = f"{where}: {why}" if why else ""
    sees = model.projector is not None
    if sees:
        reason = "\n".join(part for part in (f"vision: takes images ({model.projector_file})",
                                              reason) if part)
    if fit is None:
        return ModelChoice(model.ref, where, detail=reason, vision=sees)
    return ModelChoice(model.ref, where, fit.label, BADGE_COLOR[fit.placement],
                       "\n".join(part for part in (fit.explain(), reason) if part), sees)


def remote_choice(ref: str) -> ModelChoice:
    return ModelChoice(ref, "remote", detail="runs on a remote server, in its memory")


def matches(choice: ModelChoice, query: str) -> bool:
    """Every word of the query is in the choice's text (case-insensitive), as in the Models
    page's search."""
    text = choice.text.lower()
    return all(word in text for word in query.lower().split())
