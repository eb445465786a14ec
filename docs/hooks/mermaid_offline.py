"""MkDocs hook: pages with a diagram load the mermaid vendored in `docs/javascripts/`.

Material for MkDocs draws `mermaid` fences with the `mermaid` it finds on the page, and
fetches one from a CDN only when there is none: offline or behind a firewall a reader would
see the diagrams' source instead. This hook puts a script tag for the vendored copy (see
`docs/javascripts/vendor-mermaid.sh`) before Material's own script, on the pages that draw a
diagram and no other, so the rest of the site does not load 3.5 MB it never uses.
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url

MERMAID = "javascripts/mermaid.min.js"
MATERIAL_SCRIPT = re.compile(r'<script src="[^"]*assets/javascripts/bundle\.[0-9a-f]+\.min\.js"')


def on_post_page(output: str, page: Page, **_: Any) -> str:
    """Load the vendored mermaid before Material's script on a page with a diagram."""
    if '<pre class="mermaid">' not in output:
        return output
    material = MATERIAL_SCRIPT.search(output)
    if material is None:
        raise RuntimeError(f"{page.file.src_uri}: Material's script tag not found; update {__file__}")
    tag = f'<script src="{get_relative_url(MERMAID, page.url)}"></script>\n'
    return output[: material.start()] + tag + output[material.start() :]
