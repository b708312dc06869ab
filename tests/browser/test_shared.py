"""Fast browser tier for the shared front-end parts, loaded from source (js/shared/*.js).

The panels use these through their bundles; here each is imported directly so its contract is
checked on its own: number formatting, float and array decoding (with bytes made by the Python
encoder), the browser's sort order against pandas' order, and the SVG chart.
"""

from __future__ import annotations

import base64
import math

import pytest

from torchlens_nb import widgets
from torchlens_nb._jsonsafe import to_jsonable
from torchlens_nb.report import Table

pytestmark = pytest.mark.browser


@pytest.fixture
def shared(page, base_url):
    """The harness page, with ``window.shared`` = the js/shared modules by name."""
    page.goto(f"{base_url}/harness/harness.html")
    page.wait_for_function("() => window.harness?.ready")
    page.evaluate("""async () => {
        const names = ["format", "payload", "table", "chart", "dom"];
        const mods = await Promise.all(names.map((n) => import(`/js/shared/${n}.js`)));
        window.shared = Object.fromEntries(names.map((n, i) => [n, mods[i]]));
        const css = await fetch("/static/theme.css").then((r) => r.text());
        document.head.append(Object.assign(document.createElement("style"), { textContent: css }));
    }""")
    return page


NUMBER_TEXT = {  # JS expression -> what formatNumber shows
    "NaN": "nan",
    "Infinity": "inf",
    "-Infinity": "-inf",
    "-0": "-0",
    "0": "0",
    "1234567": "1,234,567",
    "0.123456": "0.1235",
    "12345.678": "12,350",
    "0.0001234": "1.23e-4",
    "1e308": "1.00e308",
    "5e-324": "4.94e-324",
    "null": "—",
}


def test_format_number_spells_values_like_python(shared) -> None:
    shown = shared.evaluate(
        "(exprs) => exprs.map((e) => shared.format.formatNumber(eval(e)))", list(NUMBER_TEXT)
    )
    assert dict(zip(NUMBER_TEXT, shown)) == NUMBER_TEXT


def test_format_shapes_bytes_and_values(shared) -> None:
    assert shared.evaluate("""() => [
        shared.format.formatShape([]), shared.format.formatShape([5]),
        shared.format.formatShape([2, 3]), shared.format.formatBytes(512),
        shared.format.formatBytes(1536), shared.format.formatBytes(3 * 2 ** 20),
        shared.format.formatDtype("torch.float16"), shared.format.formatValue(true),
        shared.format.formatValue({ $array: "summary", shape: [64, 64], dtype: "float32" }),
    ]""") == [
        "()",
        "(5,)",
        "(2, 3)",
        "512 B",
        "1.5 KiB",
        "3.0 MiB",
        "float16",
        "True",
        "array (64, 64) float32",
    ]


def test_decode_floats_restores_non_finite_numbers(shared) -> None:
    assert shared.evaluate("""() => {
        const d = shared.payload.decodeFloats({ a: [{ $float: "nan" }, { $float: "-inf" }, 1],
                                                b: { $float: "inf" }, c: { $float: "nan", x: 1 } });
        return [Number.isNaN(d.a[0]), d.a[1] === -Infinity, d.b === Infinity, d.c.x];
    }""") == [True, True, True, 1]


@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
def test_read_arrays_decodes_python_bytes(shared, dtype) -> None:
    values = (
        [[0.5, 2.0, 255.0], [0.0, 7.0, 1.0]]
        if dtype == "uint8"
        else [[0.5, -2.0, math.inf], [0.0, 65504.0, 1e-3]]
    )
    spec = widgets.encode_array(values, dtype)
    decoded = shared.evaluate(
        """([spec, b64]) => {
        const view = harness.toDataView(b64);
        const arrays = shared.payload.readArrays({ m: { ...spec, data: view } });
        return { shape: arrays.m.shape, values: Array.from(arrays.m.values, (v) => String(v)) };
    }""",
        [{"dtype": dtype, "shape": spec["shape"]}, base64.b64encode(spec["data"]).decode()],
    )
    assert decoded["shape"] == [2, 3]
    expected = {
        "float32": ["0.5", "-2", "Infinity", "0", "65504", "0.0010000000474974513"],
        "float16": ["0.5", "-2", "Infinity", "0", "65504", "0.0010004043579101562"],
        "uint8": ["0", "2", "255", "0", "7", "1"],
    }[dtype]  # uint8 truncates 0.5 -> 0
    assert decoded["values"] == expected


def test_browser_sort_order_matches_pandas_pages(shared) -> None:
    values = [None, "b", 2, True, math.nan, 1.5, "a", -math.inf, False, "B"]
    table = Table("t", ("v",), tuple((v,) for v in values))
    pager = widgets.TablePager(table)
    for descending in (False, True):
        python = [r[0] for r in pager.page(sort="v", descending=descending)["rows"]]
        payload_values = to_jsonable(values)
        browser = shared.evaluate(
            """([values, descending]) => {
            const decoded = shared.payload.decodeFloats(values);
            return decoded.map((v, i) => ({ v, i }))
              .sort((a, b) => shared.table.compareValues(a.v, b.v, descending) || a.i - b.i)
              .map(({ i }) => i);
        }""",
            [payload_values, descending],
        )
        assert [payload_values[i] for i in browser] == python, descending


def test_chart_draws_bars_on_a_log_scale_and_marks_odd_values(shared) -> None:
    svg = shared.evaluate("""() => {
        const svg = shared.chart.chart({ title: "grad norm per layer", kind: "bar", log: true,
            yLabel: "norm", labels: ["embed", "attn", "mlp", "head", "norm"],
            series: [{ name: "grad", values: [1e-6, 3e-3, NaN, 0, 12] }] });
        const host = shared.dom.h("div", { class: "tln-panel", id: "chart-host" }, svg);
        document.body.append(host);
        return { bars: svg.querySelectorAll("rect").length,
                 odd: Array.from(svg.querySelectorAll(".tln-chart-odd title"), (t) => t.textContent),
                 ticks: Array.from(svg.querySelectorAll(".tln-chart-axes > text"), (t) => t.textContent),
                 label: svg.getAttribute("aria-label") };
    }""")
    assert svg["bars"] == 3  # NaN and 0 cannot sit on a log axis: marked, not dropped
    assert svg["odd"] == ["grad mlp: nan", "grad head: 0"]
    # axis 1e-6..1e2 (9 decades): every second power of ten, the 5 category labels, the axis title
    assert svg["ticks"] == [
        "1.00e-6",
        "1.00e-4",
        "0.01",
        "1",
        "100",
        "embed",
        "attn",
        "mlp",
        "head",
        "norm",
        "norm (log)",
    ]
    assert svg["label"] == "grad norm per layer"
    shared.locator("#chart-host").screenshot(
        path=str(widgets.STATIC_DIR.parents[2] / "tests" / "artifacts" / "chart_log_bars.png")
    )


def test_linear_ticks_are_round_numbers(shared) -> None:
    assert shared.evaluate("() => shared.chart.ticks(0, 1, false)") == [0, 0.2, 0.4, 0.6, 0.8, 1]
    assert shared.evaluate("() => shared.chart.ticks(-3, 7, false)") == [-2, 0, 2, 4, 6]
