"""Make docs/report.png, the README's picture of report.html, from the bundled sample.

    python docs/screenshot.py            # builds the sample, then headless Chromium

Builds `samples/digits_cnn.onnx` for pixel-npu (compared on every shipped device) into a
temporary folder, renders its report.html in headless Chromium with networking switched
off, and writes a 1280-pixel-wide PNG of the top of the page (the figures and the charts).
Needs Chromium (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ["build", "samples/digits_cnn.onnx", "--device", "pixel-npu,all",
         "--calib", "samples/digits_calib.npz", "--eval", "samples/digits_eval.npz"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars"]


def build_sample(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "edgeopt.cli", *BUILD, "-o", str(out)], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    return out / "report.html"


def screenshot(report: Path, png: Path, width: int, height: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="edgeopt-chromium-") as profile:
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}",
                        f"--window-size={width},{height}", f"--screenshot={png}",
                        report.as_uri()], check=True, capture_output=True, timeout=120)


def shrink(png: Path) -> None:
    """A 256-colour palette: the page is flat colours and text, so it looks the same at a
    third of the size."""
    from PIL import Image

    with Image.open(png) as image:
        image.convert("RGB").quantize(colors=256).save(png, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="an existing report.html (default: build "
                        "the sample)")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "report.png")
    parser.add_argument("--size", default="1280x2400", help="window WIDTHxHEIGHT")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="edgeopt-sample-") as tmp:
        report = args.report or build_sample(Path(tmp) / "dist")
        screenshot(report.resolve(), args.output, width, height)
    shrink(args.output)
    print(f"wrote {args.output} ({args.output.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
