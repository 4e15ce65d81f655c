"""Chart data (series names, categories, cached values) as table blocks: PPTX charts built with
python-pptx, real charts in PPTX and XLSX files, and a hostile chart part."""

from __future__ import annotations

import io

from include.contract import BlockKind
from plugins.parsers._common import Deadline
from plugins.parsers._ooxml_charts import MAX_POINTS, chart_table
from tests.parsers.conftest import parse_bytes, realdoc


def _chart_deck() -> bytes:
    from pptx import Presentation
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    prs = Presentation()
    first = prs.slides.add_slide(prs.slide_layouts[5])
    first.shapes.title.text = "Intro"
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "Revenue by region"
    data = CategoryChartData(number_format="0.0")
    data.categories = ["North", "South", "East"]
    data.add_series("2023", (1.25, 2.5, 3.75))
    data.add_series("2024", (4.0, 5.5, 6.0))
    frame = slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(2), Inches(6), Inches(4), data)
    frame.chart.has_title = True
    frame.chart.chart_title.text_frame.text = "Revenue (MEUR)"
    box = slide.shapes.add_textbox(Inches(1), Inches(6.5), Inches(6), Inches(1))
    box.text_frame.text = "Source: finance"
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def test_python_pptx_chart_becomes_a_table_on_its_slide():
    doc = parse_bytes(_chart_deck(), "charts.pptx")
    table = next(b for b in doc.blocks if b.kind == BlockKind.TABLE)
    assert table.header == ["Revenue (MEUR)", "2023", "2024"]
    assert table.rows == [["North", "1.3", "4.0"], ["South", "2.5", "5.5"], ["East", "3.8", "6.0"]]
    assert table.metadata["chart"] == "barChart"
    assert table.metadata["chart_title"] == "Revenue (MEUR)"
    assert table.positions[0].slide == 2
    assert table.heading_path == ["Revenue by region"]
    # reading order on the slide: the chart (top) before the text box under it
    texts = [b.text for b in doc.blocks if b.positions and b.positions[0].slide == 2]
    assert texts.index(table.text) < texts.index("Source: finance")


def test_real_pptx_charts():
    # 0724_testPPT_various2.pptx (Apache Tika): a clustered bar chart with three series on slide 3
    doc = parse_bytes(realdoc("pptx/0724_testPPT_various2.pptx"), "various2.pptx")
    table = next(b for b in doc.blocks if b.metadata.get("chart"))
    assert table.header == ["SLIDE3ChartTitle", "Series 1", "Series 2", "Series 3"]
    assert table.rows[0] == ["Category 1", "4.3", "2.4", "2"]
    assert len(table.rows) == 4
    # 0665_test.pptx (python-pptx): numeric categories 2000-2003
    chart = next(b for b in parse_bytes(realdoc("pptx/0665_test.pptx"), "t.pptx").blocks if b.metadata.get("chart"))
    assert [r[0] for r in chart.rows] == ["2000", "2001", "2002", "2003"]


def test_real_xlsx_chart_after_its_sheet():
    # 0856_testEXCEL_charts.xlsx (Apache Tika): a pie chart over the sheet's monthly numbers
    doc = parse_bytes(realdoc("xlsx/0856_testEXCEL_charts.xlsx"), "charts.xlsx")
    table = next(b for b in doc.blocks if b.metadata.get("chart"))
    assert table.metadata["chart"] == "pieChart"
    assert table.header == ["wants a peach", "NUMBER"]
    assert table.rows[:2] == [["January", "5"], ["February", "8"]]
    assert table is doc.blocks[-1]  # after the sheet's rows
    assert table.positions[0].sheet == doc.metadata["sheets"][0]


def test_hostile_chart_indexes_do_not_size_the_table():
    from lxml import etree

    c = "http://schemas.openxmlformats.org/drawingml/2006/chart"
    xml = (
        f'<c:chartSpace xmlns:c="{c}"><c:chart><c:plotArea><c:lineChart><c:ser>'
        '<c:val><c:numRef><c:numCache><c:ptCount val="2000000000"/>'
        '<c:pt idx="0"><c:v>1</c:v></c:pt><c:pt idx="2147483647"><c:v>2</c:v></c:pt>'
        f'<c:pt idx="{MAX_POINTS - 1}"><c:v>3</c:v></c:pt>'
        "</c:numCache></c:numRef></c:val></c:ser></c:lineChart></c:plotArea></c:chart></c:chartSpace>"
    )
    table = chart_table(etree.fromstring(xml.encode()), Deadline(10))
    assert table is not None
    assert table.rows == [["1", "1"], [str(MAX_POINTS), "3"]]  # no category cache: numbered rows
