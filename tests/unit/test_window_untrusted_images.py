"""A model's answer (or an imported chat) names files and URLs; the window loads none of them
(issue 37). `![x](/dev/zero)` would have Qt read forever on the UI thread: here the image is
a FIFO, which blocks whoever opens it to read until a writer comes, so a render that reads it
would hang, and the watchdog process that comes to unblock it after 3 s fails the test."""

from __future__ import annotations

import os
import subprocess
import sys

from app.gui.chat_view import MessageText
from app.gui.markdown import render_markdown

WATCHDOG = """
import os, sys, time
fifo, mark = sys.argv[1], sys.argv[2]
time.sleep(3)
while True:  # lets a reader blocked in open() go on (it reads nothing), and says so
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        open(mark, "w").close()
    except OSError:
        pass  # nobody is reading it now
    time.sleep(0.2)
"""


def test_an_image_in_an_answer_is_a_link_and_its_file_is_never_opened(qtbot, tmp_path):
    fifo, unblocked = tmp_path / "image.png", tmp_path / "unblocked"
    os.mkfifo(fifo)
    # in another process: a UI thread stuck in open() holds the GIL
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(fifo), str(unblocked)])
    try:
        text = MessageText(dark=False)
        qtbot.addWidget(text)
        text.show()
        for source in [f"file://{fifo}", str(fifo)]:
            text.set_markdown(f"Here is the chart:\n\n![x]({source})\n\nand "
                              f'<img src="{fifo}"> as HTML.')
            qtbot.wait(50)  # the document lays out (and would load its images) here
    finally:
        watchdog.kill()
        watchdog.wait()
    assert not unblocked.exists(), "rendering the answer opened the image file"
    assert "<img" not in text.toHtml()
    assert "[image: x]" in text.toPlainText()


def test_images_render_as_links_and_only_web_links_open():
    rendered = render_markdown('![a "chart"](https://example.com/c.png) ![](/dev/zero) '
                               '![](file:///etc/passwd)')
    assert "<img" not in rendered.html
    assert 'href="https://example.com/c.png"' in rendered.html
    assert "[image: a &quot;chart&quot;]" in rendered.html
    assert 'href="/dev/zero"' in rendered.html and "[image: image]" in rendered.html
    assert 'href="file:' not in rendered.html  # markdown-it leaves file: links as text
