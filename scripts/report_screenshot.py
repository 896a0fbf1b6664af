"""Write a run's HTML report and a full-page PNG screenshot of it (headless Debian Chromium, offline).

    .venv/bin/python scripts/report_screenshot.py RUN_DIR OUT.png [--width 1400] [--open-first]

Needs selenium (the dev extra) and Debian's chromium + chromium-driver (scripts/setup.sh installs
them when run as root). Used for the picture of the main job's report in docs/report.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--open-first", action="store_true", help="expand the first sample episode")
    args = parser.parse_args()

    from selenium.webdriver.common.by import By

    from teamrl.report import write_report
    from teamrl.report.browser import BrowserMissing, headless_chromium

    with tempfile.TemporaryDirectory() as tmp:
        report = write_report([args.run_dir], Path(tmp) / "report")
        try:
            drv = headless_chromium(Path(tmp) / "profile", width=args.width)
        except BrowserMissing as exc:
            print(f"report_screenshot: {exc}", file=sys.stderr)
            return 2
        try:
            drv.get(Path(report.index).resolve().as_uri())
            if args.open_first:
                summaries = drv.find_elements(By.CSS_SELECTOR, "details summary")
                if summaries:
                    summaries[0].click()
            height = drv.execute_script("return document.documentElement.scrollHeight")
            drv.set_window_size(args.width, min(int(height) + 40, 16000))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            drv.save_screenshot(str(args.out))
        finally:
            drv.quit()
    print(f"screenshot written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
