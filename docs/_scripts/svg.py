"""A small SVG writer shared by the diagram and plot scripts (standard library only)."""

from __future__ import annotations

from html import escape
from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "_static"

INK = "#1f2933"
MUTED = "#52606d"
LINE = "#9aa5b1"
PREP = "#fff4d6"  # done before the capture
PREP_EDGE = "#c9a227"
YOURS = "#e3f0ff"  # your kernels
YOURS_EDGE = "#3b82c4"
CUBLAS = "#e6f6ec"  # cuBLAS
CUBLAS_EDGE = "#2f9e5b"
HOST = "#f3e8ff"
HOST_EDGE = "#8b5cf6"
SANS = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
MONO = "ui-monospace, 'SFMono-Regular', Menlo, Consolas, 'DejaVu Sans Mono', monospace"


class Svg:
    """A drawing: shapes appended in order, written with a white background."""

    def __init__(self, width: int, height: int, title: str) -> None:
        self.width, self.height, self.title = width, height, title
        self.parts: list[str] = []

    def rect(self, x, y, w, h, fill, stroke, *, radius=8, dash=False) -> None:
        extra = ' stroke-dasharray="6 4"' if dash else ""
        self.parts.append(
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="{radius}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="1.5"{extra}/>'
        )

    def text(self, x, y, content, *, size=14, mono=False, bold=False, anchor="middle",
             color=INK, halo=False) -> None:  # fmt: skip
        weight = ' font-weight="600"' if bold else ""
        weight += ' paint-order="stroke" stroke="#ffffff" stroke-width="3"' if halo else ""
        family = MONO if mono else SANS
        self.parts.append(
            f'<text x="{x}" y="{y}" font-family="{family}" font-size="{size}"{weight} '
            f'fill="{color}" text-anchor="{anchor}">{escape(content)}</text>'
        )

    def lines(self, x, y, rows, *, size=14, gap=19, **style) -> None:
        for index, row in enumerate(rows):
            self.text(x, y + index * gap, row, size=size, **style)

    def arrow(self, x1, y1, x2, y2, *, color=MUTED, dash=False) -> None:
        extra = ' stroke-dasharray="5 4"' if dash else ""
        self.parts.append(
            f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
            f'stroke-width="1.8" marker-end="url(#head)"{extra}/>'
        )

    def path(self, d, *, color=MUTED, dash=False) -> None:
        extra = ' stroke-dasharray="5 4"' if dash else ""
        self.parts.append(
            f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.8" '
            f'marker-end="url(#head)"{extra}/>'
        )

    def write(self, name: str, directory: Path = STATIC) -> Path:
        """Write the drawing to ``directory``/``name`` (docs/_static by default)."""
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" '
            f'width="{self.width}" height="{self.height}" role="img">\n'
            f"<title>{escape(self.title)}</title>\n"
            '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{MUTED}"/></marker></defs>\n'
            f'<rect width="{self.width}" height="{self.height}" fill="#ffffff"/>\n'
        )
        path = directory / name
        path.write_text(head + "\n".join(self.parts) + "\n</svg>\n")
        return path
