"""The one result writer: JSON, the chart beside it, and the run without matplotlib."""

import json

from specdraft.results import write_results


def test_json_and_chart(tmp_path):
    said, drawn = [], []
    path = tmp_path / "new" / "run.json"
    png = write_results(str(path), {"a": 1}, plot=drawn.append, say=said.append, tag="t")
    assert json.loads(path.read_text()) == {"a": 1}
    assert png == str(tmp_path / "new" / "run.png") and drawn == [png]
    assert said == [f"[t] results: {path}", f"[t] chart: {png}"]


def test_without_matplotlib_the_json_is_still_written(tmp_path):
    def plot(png):
        raise ImportError("No module named 'matplotlib'")

    said = []
    path = tmp_path / "run.json"
    assert write_results(str(path), [1], plot=plot, png=str(tmp_path / "c.png"),
                         say=said.append) is None
    assert json.loads(path.read_text()) == [1]
    assert said[-1] == "[specdraft] matplotlib not installed: no chart"
