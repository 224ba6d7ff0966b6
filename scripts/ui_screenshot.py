"""The screenshot of docs/usage.md: a sweep's runs in MLflow's chart view, grouped by variant, loss/total charted.

    crux-sweep accumulation                                   # in an empty folder
    mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000 &
    python scripts/ui_screenshot.py --experiment accumulation --out docs/ui_compare.png

Drives the UI as a user does (MLflow 3.17): the runs page in Model training mode,
the chart view, Group by -> variant, the charts filtered to loss/total, that chart
widened and its y axis set to a log scale. Needs ``pip install playwright`` and a
Chromium at --chromium (Debian: ``apt-get install chromium``; playwright's own
browser download is not needed).
"""
from __future__ import annotations

import argparse
import io
import json
import urllib.parse
import urllib.request
from pathlib import Path

from PIL import Image
from playwright.sync_api import Page, sync_playwright

MAX_BYTES = 300_000  # an image in the repository stays small


def experiment_id(ui: str, name: str) -> str:
    query = urllib.parse.urlencode({"experiment_name": name})
    with urllib.request.urlopen(f"{ui}/api/2.0/mlflow/experiments/get-by-name?{query}", timeout=30) as answer:
        return json.load(answer)["experiment"]["experiment_id"]


def compare_view(page: Page, ui: str, experiment: str, metric: str, widen: int) -> None:
    """The chart view of the experiment's runs grouped by the param ``variant``, showing ``metric`` only, its
    chart ``widen`` pixels wider and on a log scale."""
    page.goto(f"{ui}/#/experiments/{experiment}/runs?workflowType=machine_learning&compareRunsMode=CHART")
    page.get_by_role("button", name="Close").click()  # the assistant's side panel
    page.get_by_role("button", name="Group by").click()
    page.get_by_placeholder("Search").last.fill("variant")
    page.get_by_text("variant", exact=True).last.click()  # the param (the tag crux.variant is listed above it)
    page.keyboard.press("Escape")
    page.get_by_placeholder("Search metric charts").fill(metric)
    page.wait_for_timeout(2000)  # the charts re-render once the filter applies
    corner = page.get_by_test_id("draggable-card-resize-handle").first.bounding_box()
    page.mouse.move(corner["x"] + 3, corner["y"] + 3)
    page.mouse.down()
    page.mouse.move(corner["x"] + widen, corner["y"] + 40, steps=20)
    page.mouse.up()
    page.get_by_test_id("experiment-view-compare-runs-card-menu").first.click()
    page.get_by_text("Configure", exact=True).click()
    page.get_by_role("switch").nth(1).click()  # the y axis's log scale (the x axis's comes first)
    page.get_by_role("button", name="Save changes").click()
    page.mouse.move(5, 5)  # no hover toolbar over the chart
    page.wait_for_timeout(2000)


def small_png(png: bytes) -> bytes:
    """``png`` as it is, or with its colours reduced to a palette when it is larger than ``MAX_BYTES``."""
    if len(png) <= MAX_BYTES:
        return png
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128).save(out, format="PNG", optimize=True)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ui", default="http://127.0.0.1:5000", help="where `mlflow ui` (or a server) serves")
    parser.add_argument("--experiment", default="accumulation")
    parser.add_argument("--metric", default="loss/total")
    parser.add_argument("--out", type=Path, default=Path("docs/ui_compare.png"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            compare_view(page, args.ui, experiment_id(args.ui, args.experiment), args.metric, widen=460)
            args.out.write_bytes(small_png(page.screenshot()))
        finally:
            browser.close()
    print(f"{args.out}: {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
