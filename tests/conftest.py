import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Sweeps run by tests record into a throwaway history database, not the user's.
os.environ["QUANT_HISTORY_DB"] = os.path.join(
    os.environ.get("PYTEST_TMPDIR", "/tmp"), f"quant-test-history-{os.getpid()}.sqlite")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

pytest_plugins = ["tests.engine_starts", "tests.parallel"]


def pytest_configure(config):
    """Validation answers (core/memo.py) are remembered in a throwaway directory too, one per test run."""
    from tests.parallel import check_cache

    os.environ["QUANT_CHECK_CACHE"] = check_cache(os.environ, os.getpid())


def pytest_collection_modifyitems(config, items):
    """Tests marked `browser` need Chromium: they run when asked for (`-m browser`), never by default."""
    from tests.parallel import REAL_ENGINE_MARK, unlisted_real_engine_files

    if unlisted := unlisted_real_engine_files(items):
        raise pytest.UsageError(f"real-engine tests in files without the text {REAL_ENGINE_MARK!r}, which `make test`'s "
                                f"real-engine parts would never collect (mark them with pytest.{REAL_ENGINE_MARK}): "
                                + ", ".join(unlisted))

    if "browser" not in (config.getoption("markexpr") or ""):
        deselected = [item for item in items if item.get_closest_marker("browser")]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not item.get_closest_marker("browser")]
