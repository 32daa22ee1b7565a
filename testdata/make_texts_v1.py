#!/usr/bin/env python3
"""Writes testdata/texts-v1 from testdata/texts-v2: the same texts.bin, and a text_offsets.bin
of version 1 (one u64 offset per document, then the end offset; no record checksums), the
layout this build no longer writes but must still read (crates/cellar-search/tests/it/golden_texts.rs).

Run from the repository root: python3 testdata/make_texts_v1.py
"""
import pathlib
import shutil
import struct


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


HEADER = 64
root = pathlib.Path(__file__).resolve().parent
v2, v1 = root / "texts-v2", root / "texts-v1"
v1.mkdir(exist_ok=True)
shutil.copyfile(v2 / "texts.bin", v1 / "texts.bin")
data = (v2 / "text_offsets.bin").read_bytes()
magic, version, kind, body_offset, body_len = struct.unpack_from("<8sIIQQ", data, 0)
assert version == 2 and kind == 6 and body_offset == HEADER, (version, kind, body_offset)
body = data[HEADER:HEADER + body_len]
n = (len(body) - 8) // 16
offsets = [struct.unpack_from("<Q", body, 16 * i)[0] for i in range(n)]
end = struct.unpack_from("<Q", body, 16 * n)[0]
new_body = b"".join(struct.pack("<Q", o) for o in offsets + [end])
header = bytearray(HEADER)
struct.pack_into("<8sIIQQI", header, 0, magic, 1, kind, HEADER, len(new_body), crc32c(new_body))
struct.pack_into("<I", header, 60, crc32c(bytes(header[:60])))
(v1 / "text_offsets.bin").write_bytes(bytes(header) + new_body)
print(f"wrote {v1}: {n} documents")
