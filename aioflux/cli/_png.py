"""A dependency-free PNG bar chart for ``aioflux bench --plot``.

One labelled horizontal bar per result, scaled to the largest. Text uses a
built-in 3x5 pixel font, so no plotting or font library is needed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

__all__ = ["bar_chart_png"]

_PALETTE = [(66, 133, 244), (219, 68, 55), (244, 180, 0), (15, 157, 88), (171, 71, 188)]
# Each glyph: five rows of three bits (MSB = left column).
_FONT = {
    "a": "75755", "b": "65656", "c": "74447", "d": "65556", "e": "74647", "f": "74644",
    "g": "74557", "h": "55755", "i": "72227", "j": "11157", "k": "55655", "l": "44447",
    "m": "57755", "n": "65555", "o": "75557", "p": "75744", "q": "75571", "r": "75655",
    "s": "74717", "t": "72222", "u": "55557", "v": "55552", "w": "55775", "x": "55255",
    "y": "55722", "z": "71247", "0": "75557", "1": "26227", "2": "71747", "3": "71717",
    "4": "55711", "5": "74717", "6": "74757", "7": "71111", "8": "75757", "9": "75711",
    ".": "00002", "/": "11244", " ": "00000", ":": "02020", "-": "00700",
}
_SCALE = 3  # font pixels per glyph pixel


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def _draw_text(canvas: list[bytearray], x: int, y: int, text: str) -> None:
    for ch in text.lower():
        rows = _FONT.get(ch, _FONT[" "])
        for r, bits in enumerate(rows):
            value = int(bits, 16)
            for c in range(3):
                if value & (4 >> c):
                    for dy in range(_SCALE):
                        for dx in range(_SCALE):
                            px = x + c * _SCALE + dx
                            row = canvas[y + r * _SCALE + dy]
                            if 0 <= px < len(row) // 3:
                                row[3 * px:3 * px + 3] = b"\x20\x20\x20"
        x += 4 * _SCALE


def bar_chart_png(bars: Sequence[tuple[str, float]], *, width: int = 640,
                  bar_height: int = 24, gap: int = 10) -> bytes:
    """Render labelled values as horizontal bars.

    Args:
        bars: (label, value) per bar; the label is drawn above its bar.
        width: image width in pixels.
        bar_height: height of each bar.
        gap: margin around bars and labels.

    Returns:
        The PNG file's bytes.
    """
    label_h = 5 * _SCALE + 4
    slot = label_h + bar_height + gap
    height = max(1, len(bars)) * slot + gap
    top = max((v for _, v in bars), default=0.0) or 1.0
    canvas = [bytearray(b"\xff" * (3 * width)) for _ in range(height)]
    for i, (label, value) in enumerate(bars):
        y0 = gap + i * slot
        _draw_text(canvas, gap, y0, label)
        length = int((width - 2 * gap) * max(value, 0.0) / top)
        color = bytes(_PALETTE[i % len(_PALETTE)])
        for y in range(y0 + label_h, y0 + label_h + bar_height):
            canvas[y][3 * gap:3 * (gap + length)] = color * length
    raw = b"".join(b"\x00" + bytes(row) for row in canvas)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b""))
