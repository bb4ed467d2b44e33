"""Take docs/images/tensorboard_digits.png: what TensorBoard shows for the digits example.

    python docs/scripts/tensorboard_screenshot.py [--max-epochs 12] [--out docs/images/tensorboard_digits.png]

Trains examples/digits.py (one CPU process, about 15 s) into a temporary directory, starts the real
`tensorboard` on 127.0.0.1 (a free port), photographs its page with headless Chromium
(`chromium` or `chromium-browser` on the PATH), stops TensorBoard and deletes the run. Needs the
`examples` extra (scikit-learn), tensorboard (a core dependency) and Chromium.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    raise SystemExit("headless Chromium is needed: install `chromium` (e.g. apt-get install chromium)")


def _wait_until_serving(url: str, process: subprocess.Popen, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"tensorboard exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"tensorboard did not answer on {url} within {limit_s:.0f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-epochs", type=int, default=12, help="the example's default: 12")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "tensorboard_digits.png")
    parser.add_argument("--window-size", default="1400,760")
    args = parser.parse_args(argv)
    chromium = _chromium()

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "digits_run"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / "digits.py"), "--accelerator", "cpu", "--devices", "1",
             "--max-epochs", str(args.max_epochs), "--root", str(run)],
            check=True, env=env,
        )
        port = _free_port()
        url = f"http://127.0.0.1:{port}/"
        tensorboard = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", "digits_run/logs", "--host", "127.0.0.1",
             "--port", str(port)],
            cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # the page shows the README's logdir
        )
        try:
            _wait_until_serving(url + "data/runs", tensorboard)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            # The scalars dashboard, filtered to the example's metrics, unsmoothed. The page loads its
            # data and draws the charts after the first paint: give it virtual time.
            subprocess.run(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--user-data-dir={Path(tmp) / 'chromium'}", f"--window-size={args.window_size}",
                 "--virtual-time-budget=15000", f"--screenshot={args.out}", url + "#scalars&tagFilter=loss%7Cacc&_smoothingWeight=0"],
                check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        finally:
            tensorboard.terminate()
            tensorboard.wait(timeout=30)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
