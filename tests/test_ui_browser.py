"""The MLflow UI as a user sees it: headless Chromium (Playwright) against a real `mlflow server`
holding a store like issue 24's, made by the project's own commands (train runs at b2 and b4, a
bf16 channels-last run, a sweep of b2 with two repeats, a 2-process DDP run of b2, a complexity
run, a peaks run logged after them, an analysis).

Checks issue 24's items 1-4: runs that measure differently have different names and labels; every
train run made before the peaks run shows its roofline.png naming its bound once analysis has run;
the data-parallel run's scaling is against the mean of its world-size-1 runs and the report names
the fraction of roof and has an "Implausible values" section; the link `python -m train` prints
opens on the train runs, fastest first. Also (issue 12) the report renders with every figure and
a run page shows its description. With ROOFLINE_SCREENSHOTS=1 it saves the screenshots in
docs/img/ (docs/ui.md shows them).

Needs `playwright` (requirements-dev.txt) and a Chromium at $ROOFLINE_CHROMIUM (default
/usr/bin/chromium; .ci/chromium.sh installs the Debian package); skipped with the reason when
either is missing (a CI box without them passes without these checks: marker `browser`).
Playwright's own browser download is never used. The MLflow UI polls the server and never reaches
network idle: every step waits for the element it needs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import urllib.parse
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT
from tests.helpers import TINY

CHROMIUM = os.environ.get("ROOFLINE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = os.environ.get("ROOFLINE_SCREENSHOTS") == "1"
SHOTS_DIR = ROOT / "docs" / "img"
TIMEOUT_MS = 60_000  # the first page load compiles the UI's bundle in a loaded CI box


def _missing_browser() -> str:
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -r requirements-dev.txt)"
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).is_file()):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, see .ci/chromium.sh; or set ROOFLINE_CHROMIUM)"
    return ""


pytestmark = [
    pytest.mark.server,
    pytest.mark.browser,
    pytest.mark.skipif(bool(_missing_browser()), reason=_missing_browser() or "browser present"),
    # one store is enough: the UI reads it through the server's REST API either way
    pytest.mark.parametrize("mlflow_server", ["sqlite"], indirect=True),
]

# the UI as a first visit would show it, minus the assistant panel that covers a third of the page
# and with the "Model training" view this project's runs belong to
INIT_SCRIPT = """
localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');
localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
localStorage.setItem('mlflow.workflowType_v1', '"machine_learning"');
"""


def _ddp_job(url: str, tmp: Path, argv: list[str]) -> None:
    """A 2-process data-parallel train run (torchrun, gloo on CPU) logging to the server."""
    import subprocess
    import sys

    env = dict(os.environ, MLFLOW_TRACKING_URI=url, ROOFLINE_SPOOL_DIR=str(tmp / "spool"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*cmd, "-m", "train", *argv, "--distributed", "ddp"],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _peaks_run(exp: str, env_label: str) -> str:
    """A peaks run of this CPU logged after the train runs (the usual order), with illustrative
    round ceilings (a measured one takes minutes here)."""
    from common import schema
    from common.envinfo import device_name
    from common.tracking import RunSession

    tags = {schema.TAG_ENV_LABEL: env_label, schema.TAG_DEVICE_NAME: device_name("cpu")}
    with RunSession("peaks", experiment=exp, run_name=f"peaks-cpu-{env_label}", tags=tags) as s:
        s.log_metrics({"peak_flops_per_s_fp32": 1.0e11, "peak_dram_bytes_per_s": 2.0e10})
        s.set_note("peaks cpu (illustrative ceilings for the UI test)")
    return s.run_id


@pytest.fixture(scope="module")
def ui_store(mlflow_server, tmp_path_factory):
    """A store like issue 24's, made with the project's own commands against the shared server in
    a fresh experiment: train runs (b2, b4, bf16 channels-last), a sweep of b2 with two repeats, a
    2-process DDP run of b2, a complexity run, then a peaks run (after the train runs: none of
    them could draw its roofline when it ran), then an analysis, which draws them."""
    import mlflow

    from analysis.app import main as analyze
    from train.__main__ import main as train
    from train.complexity.__main__ import main as complexity
    from train.sweep.__main__ import main as sweep

    tmp = tmp_path_factory.mktemp("ui")
    exp = f"ui-{uuid.uuid4().hex[:8]}"
    fast = [*TINY[: TINY.index("--iters") + 1], "2", *TINY[TINY.index("--iters") + 2 :]]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
        mp.setenv("ROOFLINE_SPOOL_DIR", str(tmp / "spool"))
        mp.setenv("ROOFLINE_CACHE_DIR", str(tmp / "cache"))
        mp.delenv("ROOFLINE_PEAKS_FILE", raising=False)
        for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
            mp.delenv(name, raising=False)
        mp.chdir(tmp)
        mlflow.set_tracking_uri(mlflow_server.url)
        try:
            common = ["--experiment", exp, "--env-label", "ui-box"]
            assert train([*fast, *common]) == 0
            b4 = list(fast)
            b4[b4.index("--batch") + 1] = "4"
            assert train([*b4, *common]) == 0
            bf16 = [*fast, "--precision", "bf16", "--channels-last", *common]
            assert train(bf16) == 0
            sweep_argv = [
                *("--models", "resnet18", "--batch-sizes", "2", "--image-size", "32"),
                *("--iters", "2", "--warmup-iters", "1", "--device", "cpu", "--repeats", "2"),
                *("--no-progress", "--name", f"{exp}-sweep", *common),
            ]
            assert sweep(sweep_argv) == 0
            _ddp_job(mlflow_server.url, tmp, [*fast, *common])
            cx = ["--no-progress", "--models", "resnet18", "--batch-sizes", "2"]
            assert complexity([*cx, "--image-size", "32", "--validate-rss", "false", *common]) == 0
            peaks_id = _peaks_run(exp, "ui-box")
            assert analyze(["--experiment", exp, "--out", str(tmp / "report"), "--jobs", "1"]) == 0
            client = mlflow.MlflowClient(mlflow_server.url)
            eid = client.get_experiment_by_name(exp).experiment_id
            runs = client.search_runs([eid])
        finally:
            mlflow.set_tracking_uri(None)
    by_kind: dict[str, list] = {}
    for r in runs:
        by_kind.setdefault(r.data.tags.get("run_kind"), []).append(r)
    sweep_id = by_kind["sweep"][0].info.run_id
    train_runs = sorted(by_kind["train"], key=lambda r: r.info.start_time)
    standalone = [r for r in train_runs if r.data.tags.get("mlflow.parentRunId") != sweep_id]
    return SimpleNamespace(
        url=mlflow_server.url,
        client=client,
        experiment_id=eid,
        peaks_id=peaks_id,
        train=train_runs,
        standalone=[r for r in standalone if r.data.params.get("distributed", "none") == "none"],
        ddp=[r for r in standalone if r.data.params.get("distributed") == "ddp"],
        children=[r for r in train_runs if r.data.tags.get("mlflow.parentRunId") == sweep_id],
        analysis=by_kind["analysis"][0],
    )


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=shutil.which(CHROMIUM) or CHROMIUM, args=["--no-sandbox"]
        )
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    ctx.add_init_script(INIT_SCRIPT)
    ctx.set_default_timeout(TIMEOUT_MS)
    pg = ctx.new_page()
    yield pg
    ctx.close()


def run_url(store, run_id: str, tail: str = "") -> str:
    return f"{store.url}/#/experiments/{store.experiment_id}/runs/{run_id}{tail}"


def screenshot(page, name: str, height: int = 900) -> None:
    """docs/img/<name> with ROOFLINE_SCREENSHOTS=1; `height`: a taller window for a long page."""
    if SCREENSHOTS:
        SHOTS_DIR.mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1400, "height": height})
        page.wait_for_timeout(500)  # the layout follows the new size
        page.screenshot(path=str(SHOTS_DIR / name))


def find_artifact(client, run_id: str, name: str, folder: str | None = None) -> str:
    """The path of the first artifact of the run whose file name is `name` ('' if none)."""
    for f in client.list_artifacts(run_id, folder):
        if f.is_dir:
            found = find_artifact(client, run_id, name, f.path)
            if found:
                return found
        elif Path(f.path).name == name:
            return f.path
    return ""


def all_loaded(locator) -> list:
    """[complete, naturalWidth] of every <img> the locator matches."""
    return locator.evaluate_all("imgs => imgs.map(i => [i.complete, i.naturalWidth])")


def wait_images(page, locator, timeout_ms: int = TIMEOUT_MS) -> list:
    """Waits until every image the locator matches has finished loading (or failed)."""
    step = 250
    for _ in range(timeout_ms // step):
        state = all_loaded(locator)
        if state and all(done for done, _ in state):
            return state
        page.wait_for_timeout(step)
    return all_loaded(locator)


def test_analysis_report_renders_in_the_artifact_view_with_every_figure_loaded(ui_store, page):
    figures = [
        f.path
        for f in ui_store.client.list_artifacts(ui_store.analysis.info.run_id, "report/figures")
    ]
    assert len(figures) >= 4  # rooflines, throughput, variability, intensity
    page.goto(run_url(ui_store, ui_store.analysis.info.run_id, "/artifacts/report/report.html"))
    frame = page.frame_locator("iframe.mlflow-html-iframe")
    frame.get_by_role("heading", name="Training performance and roofline report").wait_for()
    images = wait_images(page, frame.locator("img"))
    assert len(images) == len(figures)
    assert all(done and width > 0 for done, width in images), images
    # the summary table is inline and nothing links elsewhere (links go nowhere in that iframe)
    assert frame.locator("table").count() >= 3
    assert frame.locator("a[href]").count() == 0
    frame.locator("figure").first.scroll_into_view_if_needed()  # a figure in the screenshot
    screenshot(page, "analysis_report.png")


def test_runs_that_measure_differently_have_different_names_in_the_compare_view(ui_store, page):
    """Item 1: the DDP run and the single-process run of the same model and batch differ in name
    and config_label; the bf16 channels-last run's name says both; sweep repeats are distinct."""
    (ddp,) = ui_store.ddp
    single = next(r for r in ui_store.standalone if r.data.params["batch_size"] == "2")
    assert single.data.params["precision"] == "fp32"
    assert single.info.run_name == "b2-fp32-32px-resnet18-cpu"
    assert ddp.info.run_name == "ddp-2proc-b2-fp32-32px-resnet18-gloo-cpu"
    assert ddp.data.tags["config_label"] == "ddp/2proc/b2/fp32/32px/resnet18/gloo"
    assert single.data.tags["config_label"] == "b2/fp32/32px/resnet18"
    names = {r.info.run_name for r in ui_store.standalone}
    assert "b2-bf16-cl-32px-resnet18-cpu" in names
    runs = ui_store.standalone + ui_store.children + ui_store.ddp
    q = urllib.parse.urlencode(
        {
            "runs": json.dumps([r.info.run_id for r in runs]),
            "experiments": json.dumps([ui_store.experiment_id]),
        }
    )
    page.goto(f"{ui_store.url}/#/compare-runs?{q}")
    row = page.locator("tr", has=page.get_by_text("Run Name:", exact=True))
    row.wait_for()
    shown = [c.strip() for c in row.locator("td").all_inner_texts() if c.strip()]
    assert sorted(shown) == sorted(r.info.run_name for r in runs)
    assert len(set(shown)) == len(shown)  # every run its own name
    screenshot(page, "compare_view.png")


def test_runs_view_the_commands_link_to_opens_fastest_first(ui_store, page):
    """Item 4: the link `python -m train` prints (common.ui.runs_view_path) lists the train
    runs only (no complexity or peaks run beside them), sorted by samples/s, fastest first."""
    from common.ui import runs_view_path

    page.goto(f"{ui_store.url}/{runs_view_path(ui_store.experiment_id)}")
    fastest = sorted(
        ui_store.train, key=lambda r: -r.data.metrics.get("throughput_samples_per_s", 0)
    )
    names = [r.info.run_name for r in fastest]
    links = [page.get_by_role("link", name=n, exact=True).first for n in names]
    links[0].wait_for()
    tops = [link.bounding_box()["y"] for link in links]
    assert tops == sorted(tops), list(zip(names, tops))
    assert page.get_by_role("link", name="complexity-resnet18-32px-cpu").count() == 0
    screenshot(page, "runs_fastest_first.png")


def test_train_run_page_shows_its_description_with_its_bound(ui_store, page):
    run = ui_store.standalone[0]
    note = run.data.tags.get("mlflow.note.content", "")
    assert note, "the run has no mlflow.note.content"
    roof_line = next(x for x in note.splitlines() if x.startswith("Roofline: "))
    assert roof_line.startswith(f"Roofline: {run.data.tags['bound']}, ")
    page.goto(run_url(ui_store, run.info.run_id))
    page.get_by_text("About this run").wait_for()
    # the description box renders the note as Markdown: look for its first clause as text
    first = note.splitlines()[0].split(",")[0].strip()
    page.get_by_text(first, exact=False).first.wait_for()
    page.get_by_text(roof_line.split(" (")[0], exact=False).first.wait_for()
    assert page.get_by_text("No description", exact=True).count() == 0
    screenshot(page, "run_page.png", height=1300)


def test_data_parallel_run_says_its_scaling_against_the_mean_baseline(ui_store, page):
    """Item 3: one scaling baseline (the mean of the single-process runs), as a percentage, and
    the description flags it when over 100 %."""
    (ddp,) = ui_store.ddp
    m, note = ddp.data.metrics, ddp.data.tags["mlflow.note.content"]
    singles = [
        r.data.metrics["throughput_samples_per_s"]
        for r in ui_store.standalone + ui_store.children
        if r.data.tags["config_key"] == ddp.data.tags["base_config_key"]
    ]
    assert len(singles) == 3 == m["scaling_baseline_n_runs"]  # b2 standalone and two repeats
    base = sum(singles) / len(singles)
    assert m["scaling_efficiency"] == pytest.approx(m["throughput_samples_per_s"] / (2 * base))
    pct = f"{100 * m['scaling_efficiency']:.1f}%"
    assert f"scaling efficiency {pct} against the mean samples/s of 3 single-process run(s)" in note
    assert ("Check: scaling efficiency" in note) == (m["scaling_efficiency"] > 1)
    page.goto(run_url(ui_store, ddp.info.run_id))
    page.get_by_text("Data parallel:", exact=False).first.wait_for()


def test_report_names_fraction_of_roof_and_has_an_implausible_values_section(ui_store, page):
    page.goto(run_url(ui_store, ui_store.analysis.info.run_id, "/artifacts/report/report.html"))
    frame = page.frame_locator("iframe.mlflow-html-iframe")
    heading = frame.get_by_role("heading", name="Implausible values")
    heading.wait_for()
    # the Findings table and the summary table, each naming the one efficiency the same way
    assert frame.get_by_role("columnheader", name="fraction of roof").count() == 2
    assert frame.get_by_role("columnheader", name="efficiency", exact=True).count() == 0
    heading.scroll_into_view_if_needed()
    screenshot(page, "analysis_report_flags.png")


def test_train_run_made_before_the_peaks_run_shows_its_roofline_figure(ui_store, page):
    """Item 2: every train run (made before the peaks run) has roofline.png after the analysis,
    drawn against the peaks run, its bound and fraction of roof as tag and metric."""
    for r in ui_store.train:
        assert r.info.start_time < ui_store.client.get_run(ui_store.peaks_id).info.start_time
        assert r.data.tags["roofline_roof"] == f"measured: peaks run {ui_store.peaks_id[:8]}"
        assert r.data.tags["bound"] in ("memory-bound", "compute-bound")
        assert 0 < r.data.metrics["fraction_of_roof"]
    run_id = ui_store.standalone[0].info.run_id
    path = find_artifact(ui_store.client, run_id, "roofline.png")
    assert path == "roofline.png"
    page.goto(run_url(ui_store, run_id, f"/artifacts/{path}"))
    img = page.locator(f'img[alt="{path}"]').first
    img.wait_for()
    images = wait_images(page, img)
    assert images and all(done and width > 0 for done, width in images), images
    screenshot(page, "run_roofline.png")
