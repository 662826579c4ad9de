"""Retake docs/tensorboard/*.png: the three sweeps README shows, opened in TensorBoard (on
127.0.0.1 only) in headless Chromium at 1366 px, as a user first sees each page.

    apt-get install -y chromium                    # the browser: Debian's
    pip install --target /tmp/pw playwright        # its driver only, outside the project's venv
    PYTHONPATH=/tmp/pw python docs/tensorboard/shoot.py [--sweeps DIR]

With --sweeps DIR holding mlp/, poly3/ and cnn/ from an earlier call, no sweep runs again.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.helpers.tensorboard_server import tensorboard  # noqa: E402

OPTIMIZERS = ",".join(sorted(p.stem for p in (REPO / "conf" / "optimizer").glob("*.yaml")))
SWEEPS = {  # name: train.py's arguments
    "mlp": ["task=mlp", "steps=300", "ops.activation=custom,builtin", "seed=0,1,2"],
    "poly3": ["task=poly3", f"optimizer={OPTIMIZERS}"],
    "cnn": ["task=cnn", "steps=300", "ops.conv_bn=custom,builtin"],
}
SHOTS = {  # name: the pages to take, (URL fragment, a tab to click or None, file name)
    "mlp": [("timeseries", None, "mlp_timeseries"),
            ("custom_scalars", None, "mlp_custom_scalars"),
            ("hparams", None, "mlp_hparams"),
            ("hparams", "Parallel Coordinates View", "mlp_parallel_coordinates")],
    "poly3": [("timeseries", None, "poly3_timeseries"),
              ("hparams", None, "poly3_hparams"),
              ("hparams", "Parallel Coordinates View", "poly3_parallel_coordinates")],
    "cnn": [("hparams", None, "cnn_hparams")],
}
WIDTH, HEIGHT, SETTLE_S = 1366, 900, 6.0


def sweep(name: str, root: Path) -> Path:
    """Run the sweep `name` into root/name unless it is there; its dir."""
    out = root / name
    if not (out / "compare.md").is_file():
        subprocess.run([sys.executable, "train.py", "-m", *SWEEPS[name],
                        f"hydra.sweep.dir={out}"], cwd=REPO, check=True)
    return out


def shoot(browser, base: str, fragment: str, tab: str | None, path: Path) -> None:
    """One page of TensorBoard at `base`, settled, as a small palette PNG at `path`."""
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.goto(f"{base}#{fragment}")
    page.wait_for_load_state("networkidle")
    time.sleep(SETTLE_S)  # the dashboards draw after their data arrive
    if tab:
        page.get_by_text(tab).click()
        time.sleep(SETTLE_S)
    page.screenshot(path=str(path))
    page.close()
    Image.open(path).convert("RGB").quantize(colors=128).save(path, optimize=True)
    print(f"{path.relative_to(REPO)}: {path.stat().st_size // 1024} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=Path, help="where the sweeps are or go (default: temp)")
    args = parser.parse_args()
    root = args.sweeps or Path(tempfile.mkdtemp(prefix="tensorboard-shots-"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=["--no-sandbox"])
        for name, shots in SHOTS.items():
            with tensorboard(sweep(name, root)) as base:
                for fragment, tab, file in shots:
                    shoot(browser, base, fragment, tab, Path(__file__).parent / f"{file}.png")
        browser.close()


if __name__ == "__main__":
    main()
