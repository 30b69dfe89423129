"""The demo's HTML report (scripts/demo-report) as a browser shows it: rendered by headless Chromium, its DOM
checked for every section and a timeline row per pipeline rank, its screenshot checked for content, and the
file checked by an HTML validator (tidy)."""

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import REPO, fulcrum_cli

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--hide-scrollbars"]
SECTIONS = ("summary", "timeline", "idle", "memory", "balance", "compare")


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: scripts/setup installs it"
    return path


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    cli = fulcrum_cli()
    done = subprocess.run([str(REPO / "scripts" / "demo-report"), cli, str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"report: {out / 'report.html'}" in done.stdout
    return out


class Dom(HTMLParser):
    """Section ids, and per SVG id the rows it holds (its <g class="timeline-row"> and <g class="bar">)."""

    def __init__(self):
        super().__init__()
        self.sections, self.rows, self.svg = [], {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a.get("id"))
        elif tag == "svg":
            self.svg = a.get("id")
            self.rows.setdefault(self.svg, 0)
        elif tag == "g" and a.get("class") in ("timeline-row", "bar") and self.svg:
            self.rows[self.svg] += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg = None


def test_the_demo_report_renders_every_section_and_a_row_per_stage(demo):
    dumped = subprocess.run([tool("chromium"), *CHROMIUM_FLAGS, "--dump-dom", (demo / "report.html").as_uri()],
                            capture_output=True, text=True, timeout=120)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Dom()
    dom.feed(dumped.stdout)
    for section in SECTIONS:
        assert section in dom.sections, f"section {section!r} missing from the rendered page"
    pp = json.loads((demo / "fulcrum.json").read_text())["plan"]["pp"]
    assert dom.rows["timeline-chart"] == pp
    assert dom.rows["idle-chart"] == pp
    assert dom.rows["memory-chart"] == pp
    assert dom.rows["compare-chart"] == 4  # fulcrum, zero3, megatron, omnibal


def test_the_demo_report_screenshot_is_not_blank(demo):
    from PIL import Image

    shot = demo / "shot.png"
    done = subprocess.run([tool("chromium"), *CHROMIUM_FLAGS, f"--screenshot={shot}", "--window-size=1200,1600",
                           (demo / "report.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    pixels = list(image.get_flattened_data())
    inked = sum(1 for p in pixels if p != (255, 255, 255)) / len(pixels)
    colours = len(set(pixels))
    # Text, tables and the coloured timeline: a blank or unstyled page has neither this much ink nor colour.
    assert inked > 0.08, f"only {inked:.1%} of the screenshot is not white"
    assert colours > 50, f"only {colours} distinct colours"
    # The timeline's colours are there: the LLM's forward (orange) and the encoder's work: its forward (light blue)
    # in a stage of its own, or the cyan of encoder work the plan places in the LLM's bubbles; a single stage
    # holding both runs them in one pass, drawn in the pink of a stage of several components.
    plan = json.loads((demo / "fulcrum.json").read_text())
    if plan.get("optimus"):
        expected = ((0xfd, 0xd0, 0xa2), (0x17, 0xbe, 0xcf))
    elif len(plan["plan"]["stages"]) == 1:
        expected = ((0xfb, 0xb4, 0xb9),)
    else:
        expected = ((0xfd, 0xd0, 0xa2), (0x9e, 0xca, 0xe1))
    for colour in expected:
        assert colour in set(pixels), f"no pixel of {colour}"


def test_the_demo_report_is_valid_html(demo):
    done = subprocess.run([tool("tidy"), "-q", "-e", str(demo / "report.html")], capture_output=True, text=True,
                          timeout=120)
    # tidy: 0 clean, 1 warnings, 2 errors.
    assert done.returncode == 0, done.stderr[-4000:]
