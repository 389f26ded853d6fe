"""POSIX ``cksum`` (the CRC the read cursor stores).

File: none of its own; it hashes the last inbox line a reader was shown, for ``read/<h>.cursor``.
Spec: behaviour 6.6 "Hash"; testing-notes 3.6.
Guarantee: ``cksum(data)`` equals the first field ``/usr/bin/cksum`` prints for ``data``: CRC-32 with
polynomial 0x04C11DB7 fed most-significant bit first from 0, then the byte length fed least-significant
byte first (only as many bytes as it needs, none for 0), then complemented.
What would break it: ``zlib.crc32`` (the reflected CRC, different numbers) or forgetting the length bytes;
the shell readers compare these numbers with ones they computed themselves.
"""

from __future__ import annotations

_POLY = 0x04C11DB7
_MASK = 0xFFFFFFFF


def _build_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        reg = byte << 24
        for _ in range(8):
            reg = ((reg << 1) ^ _POLY) if reg & 0x80000000 else (reg << 1)
        table.append(reg & _MASK)
    return tuple(table)


_TABLE = _build_table()


def cksum(data: bytes) -> int:
    """The POSIX ``cksum`` CRC of ``data`` as an unsigned 32-bit integer."""
    table = _TABLE
    crc = 0
    for b in data:
        crc = ((crc << 8) & _MASK) ^ table[(crc >> 24) ^ b]
    n = len(data)
    while n:
        crc = ((crc << 8) & _MASK) ^ table[(crc >> 24) ^ (n & 0xFF)]
        n >>= 8
    return ~crc & _MASK
