"""Hypothesis loads every installed plugin (its "hypothesis" entry points) when it is first
imported; one could change the inputs the checks draw, which the golden answers were recorded
for. The grader switches them off before anything of it imports hypothesis."""

import subprocess
import sys
import textwrap

import pytest


def _site_with_a_plugin(folder):
    (folder / "noisy_plugin.py").write_text(textwrap.dedent("""
        import pathlib, os
        def load():
            pathlib.Path(os.environ["PLUGIN_MARKER"]).write_text("loaded")
    """))
    info = folder / "noisy_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: noisy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hypothesis]\nnoisy = noisy_plugin:load\n")
    return folder


def _imports(tmp_path, code):
    marker = tmp_path / "marker"
    site = _site_with_a_plugin(tmp_path / "site")
    environment = {"PYTHONPATH": str(site), "PLUGIN_MARKER": str(marker), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return marker.exists()


def test_a_hypothesis_plugin_loads_with_hypothesis_alone(tmp_path):
    (tmp_path / "site").mkdir()
    assert _imports(tmp_path, "import hypothesis")


@pytest.mark.slow
def test_the_grader_imports_hypothesis_without_its_plugins(tmp_path):
    (tmp_path / "site").mkdir()
    assert not _imports(tmp_path, "import graders.grading")
