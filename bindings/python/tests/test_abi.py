"""The ctypes mirrors against the C compiler's layout (``kestrel_abi_layout``) and the header."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import unittest

import kestrel
from kestrel import _structs as S

from ._util import program, require


def parse_layout(text: str) -> tuple[dict[str, dict], dict[str, dict], dict[str, int]]:
    structs: dict[str, dict] = {}
    enums: dict[str, dict] = {}
    consts: dict[str, int] = {}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "struct":
            attrs = dict(w.split("=", 1) for w in words[2:])
            size, align = int(attrs.pop("size")), int(attrs.pop("align"))
            fields = [(w.split("=")[0], int(w.split("=")[1])) for w in words[4:]]
            structs[words[1]] = {"size": size, "align": align, "fields": fields}
        elif words[0] == "enum":
            values = [(w.split("=")[0], int(w.split("=")[1])) for w in words[3:]]
            enums[words[1]] = {"size": int(words[2].split("=")[1]), "values": values}
        elif words[0] == "const":
            name, value = words[1].split("=")
            consts[name] = int(value)
        else:
            raise AssertionError(f"unexpected line from kestrel_abi_layout: {line!r}")
    return structs, enums, consts


def header_structs(text: str) -> dict[str, list[str]]:
    """Every ``typedef struct X { ... } X;`` of the header with its field names in order."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out: dict[str, list[str]] = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        names: list[str] = []
        for decl in m.group(2).split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            fp = re.match(r".*\(\s*\*\s*(\w+)\s*\)\s*\(", decl)
            if fp:  # a function pointer field
                names.append(fp.group(1))
                continue
            base, _, rest = decl.partition(",")
            declarators = [re.split(r"\s|\*", base.strip())[-1]] + rest.split(",") if rest else [base]
            for d in declarators:
                ident = re.findall(r"\w+", re.sub(r"\[.*?\]", "", d))[-1]
                names.append(ident)
        out[m.group(1)] = names
    return out


class AbiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        exe = program("KESTREL_ABI_LAYOUT")
        text = subprocess.run([exe], stdout=subprocess.PIPE, check=True, timeout=30).stdout.decode()
        cls.structs, cls.enums, cls.consts = parse_layout(text)

    def test_structs_match_mirrors_both_ways(self) -> None:
        self.assertEqual(sorted(self.structs), sorted(S.STRUCTS), "structs printed vs mirrored")
        for name, layout in self.structs.items():
            cls = S.STRUCTS[name]
            with self.subTest(struct=name):
                self.assertEqual(ctypes.sizeof(cls), layout["size"], "size")
                self.assertEqual(ctypes.alignment(cls), layout["align"], "alignment")
                mirror = [(f[0], getattr(cls, f[0]).offset) for f in cls._fields_]
                self.assertEqual(mirror, layout["fields"], "field names and offsets")

    def test_enums_match_constants(self) -> None:
        self.assertEqual(sorted(self.enums), sorted(S.ENUMS))
        for name, layout in self.enums.items():
            py_enum, prefix = S.ENUMS[name]
            with self.subTest(enum=name):
                self.assertEqual(layout["size"], ctypes.sizeof(S.c_enum))
                expected = {c: v for c, v in layout["values"]}
                mirrored = {prefix + m.name: int(m.value) for m in py_enum}
                self.assertEqual(mirrored, expected)

    def test_api_version(self) -> None:
        self.assertEqual(self.consts, {"KESTREL_API_VERSION": kestrel.API_VERSION})
        self.assertEqual(kestrel.api_version(), kestrel.API_VERSION, "the loaded library's version")

    def test_status_names_match_library(self) -> None:
        lib = kestrel._lib.lib()
        for status in kestrel.Status:
            self.assertEqual(lib.kestrel_status_name(int(status)).decode(), status.name)

    def test_header_structs_listed_and_field_names_equal(self) -> None:
        path = require(os.environ.get("KESTREL_HEADER") or "", "KESTREL_HEADER")
        with open(path, encoding="utf-8") as f:
            header = header_structs(f.read())
        self.assertGreaterEqual(len(header), 11)
        self.assertEqual(sorted(header), sorted(self.structs), "every struct with a body is in abi_layout.c")
        for name, fields in header.items():
            with self.subTest(struct=name):
                self.assertEqual([f[0] for f in S.STRUCTS[name]._fields_], fields)

    def test_header_parser_handles_tricky_declarations(self) -> None:
        src = """typedef struct s { uint32_t a; /* x; y */ const char *b, *c;
                 bool (*fn)(int x, void *u); const char *const *d; int e[4]; } s;"""
        self.assertEqual(header_structs(src), {"s": ["a", "b", "c", "fn", "d", "e"]})


if __name__ == "__main__":
    unittest.main()
