"""MkDocs hook: fills the generated parts of the pages while the site builds, so the
references cannot drift from the code. A page asks for one with a marker line:

    <!-- generated: config-reference -->          every params.yaml key (kernattn.config)
    <!-- generated: cli-reference -->             every command's --help (kernattn.cli)
    <!-- generated: variants -->                  every attention variant (`kernattn variants`)
    <!-- generated: csv PATH [COL,COL,...] -->    a CSV under the repository as a table
"""

from __future__ import annotations

import re

from kernattn.docgen import render_marker

MARKER = re.compile(r"^<!-- generated: (.+?) -->$", re.MULTILINE)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (MkDocs' hook signature)
    return MARKER.sub(lambda m: render_marker(m.group(1), page.file.src_path), markdown)
