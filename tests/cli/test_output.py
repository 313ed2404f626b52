"""cluster/cli/output.table: numbers right-aligned when a whole column is numeric, bools and
None spelled out, the indent kept (the layout itself is common.text_output.format_table)."""
from __future__ import annotations

from cluster.cli.output import table


def test_table_layout(capsys):
    table(["NODE", "ROLE", "OFFSET", "LAG", "OK"],
          [["n1", "master", 1234567, 0.5, True], ["n2", None, 89, "-", False]], indent="  ")
    assert capsys.readouterr().out.splitlines() == [
        "  NODE  ROLE     OFFSET  LAG    OK",
        "  n1    master  1234567  0.500  true",
        "  n2                 89  -      false",
    ]
    table(["A", "B"], [])
    assert capsys.readouterr().out == "A  B\n"
