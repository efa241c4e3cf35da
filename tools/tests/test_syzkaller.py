"""Keeps the syzkaller description tools/syzkaller/lite.txt honest (run by `make
test`): every LITE_IOC_* command of the ABI (uapi/src/abi/) has an ioctl$ entry
whose argument direction and struct match the command's _IOC encoding, and every
described struct has the fields of its Rust struct (named by the `# abi: Name`
comment above it), in order, with the same sizes and the same total size.

It also checks tools/syzkaller/lite.txt.const, the constant values syz-extract
would find for lite.txt on amd64; after an ABI change rewrite it with
`python3 tools/tests/test_syzkaller.py --write-const`.
No syzkaller is needed: the ABI and lite.txt are parsed with a few regexes; the
ABI is read as one text, abi/mod.rs then the modules it declares, in that order."""

import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ABI = os.path.join(ROOT, "uapi", "src", "abi")
HEADER = os.path.join(ROOT, "uapi", "include", "lite_uapi.h")
DESC = os.path.join(ROOT, "tools", "syzkaller", "lite.txt")
CONST = os.path.join(ROOT, "tools", "syzkaller", "lite.txt.const")

# Constants lite.txt takes from the kernel's own headers, and the syscall numbers
# syz-extract records for its calls (amd64).
KERNEL_CONSTS = {"AT_FDCWD": 0xFFFFFFFFFFFFFF9C, "__NR_ioctl": 16, "__NR_mmap": 9, "__NR_openat": 257}

IOC_DIRS = {"": None, "W": "in", "R": "out", "WR": "inout"}
IOC_DIR_BITS = {"": 0, "W": 1, "R": 2, "WR": 3}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_abi():
    """The ABI's source: abi/mod.rs, then each module it declares (`mod x;`), which
    must be every other file of abi/."""
    root = read(os.path.join(ABI, "mod.rs"))
    mods = re.findall(r"^mod (\w+);$", root, re.M)
    files = sorted(f for f in os.listdir(ABI) if f.endswith(".rs"))
    if files != sorted(["mod.rs"] + [f"{m}.rs" for m in mods]):
        raise ValueError(f"{ABI}: files {files}, but mod.rs declares {mods}")
    return "\n".join([root] + [read(os.path.join(ABI, f"{m}.rs")) for m in mods])


def rust_int(expr):
    expr = expr.strip().replace("_", "")
    if expr == "u32::MAX":
        return 0xFFFFFFFF
    if "<<" in expr:
        a, b = expr.split("<<")
        return int(a, 0) << int(b, 0)
    return int(expr, 0)


def parse_abi(text):
    """(consts, ioctls, structs) of the ABI: ioctls maps LITE_IOC_X to (kind, nr,
    type or None, value); structs maps a name to its [(field, type)]."""
    consts = {m[1]: rust_int(m[2]) for m in re.finditer(r"pub const (\w+): u(?:32|64) = ([^;]+);", text)}
    ioctls = {}
    for m in re.finditer(r"///\s*`_IO(WR|R|W|)\('L',\s*(\d+)(?:,\s*(\w+))?\)`[^\n]*\n"
                         r"pub const (LITE_IOC_\w+): u32 = ([0-9A-Fa-fx_]+);", text):
        ioctls[m[4]] = (m[1], int(m[2]), m[3], rust_int(m[5]))
    structs = {}
    for m in re.finditer(r"pub struct (\w+) \{\n(.*?)\n\}", text, re.S):
        structs[m[1]] = re.findall(r"^\s*pub (\w+): ([^,\n]+),", m[2], re.M)
    return consts, ioctls, structs


def split_args(s):
    """Top-level comma-separated parts of a bracket's contents."""
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


def split_type(t):
    """`ptr64[out, array[int8]]` -> ("ptr64", ["out", "array[int8]"])."""
    t = t.strip()
    m = re.fullmatch(r"(\w+)(?:\[(.*)\])?", t, re.S)
    if not m:
        raise ValueError(f"cannot parse type {t!r}")
    return m[1], split_args(m[2]) if m[2] is not None else []


def parse_desc(text):
    """Resources, type aliases, structs ({name: (abi name, [(field, type, attrs)])})
    and calls ([(name, [(arg, type)], ret)]) of a syzkaller description."""
    resources, aliases, structs, calls = {}, {}, {}, []
    lines = text.splitlines()
    i, last_comment = 0, None
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line:
            last_comment = None
            continue
        if line.startswith("#"):
            last_comment = line
            continue
        if m := re.fullmatch(r"resource (\w+)\[(\w+)\](?::.*)?", line):
            resources[m[1]] = m[2]
        elif m := re.fullmatch(r"type (\w+) (.+)", line):
            aliases[m[1]] = m[2]
        elif m := re.fullmatch(r"(\w+) \{", line):
            abi = re.fullmatch(r"# abi: (\w+)", last_comment or "")
            fields = []
            while lines[i].strip() != "}":
                f = lines[i].strip()
                i += 1
                if not f or f.startswith("#"):
                    continue
                fm = re.fullmatch(r"(\w+)\s+(.+?)(?:\s+\(([\w, ]+)\))?", f)
                fields.append((fm[1], fm[2], fm[3] or ""))
            i += 1
            structs[m[1]] = (abi[1] if abi else None, fields)
        elif m := re.fullmatch(r"(\w+\$\w+)\((.*)\)(?: (\w+))?", line):
            args = [tuple(a.split(None, 1)) for a in split_args(m[2])]
            calls.append((m[1], args, m[3]))
        last_comment = None
    return resources, aliases, structs, calls


class Layout:
    """Sizes and alignments (amd64) of the ABI's types and of lite.txt types."""

    INTS = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "intptr": 8}
    RUST_INTS = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}

    def __init__(self, consts, rust_structs, resources, aliases, syz_structs):
        self.consts, self.rust_structs = consts, rust_structs
        self.resources, self.aliases, self.syz_structs = resources, aliases, syz_structs

    def value(self, s):
        s = s.strip()
        return self.consts[s] if s in self.consts else int(s, 0)

    def rust(self, t):
        t = t.strip()
        if t in self.RUST_INTS:
            return self.RUST_INTS[t], self.RUST_INTS[t]
        if m := re.fullmatch(r"\[(.+);\s*(\w+)\]", t):
            size, align = self.rust(m[1])
            return size * self.value(m[2]), align
        return self.struct([ty for _, ty in self.rust_structs[t]], self.rust)

    def syz(self, t):
        name, args = split_type(t)
        if name in self.INTS:
            return self.INTS[name], self.INTS[name]
        if name in ("const", "flags", "len", "bytesize", "proc"):
            return self.syz(args[-1])
        if name in ("ptr64", "ptr"):
            return 8, 8
        if name == "string":
            return self.value(args[1]), 1
        if name == "array":
            if len(args) != 2 or ":" in args[1]:
                raise ValueError(f"array of variable length in a struct: {t}")
            size, align = self.syz(args[0])
            return size * self.value(args[1]), align
        if name in self.resources:
            return self.syz(self.resources[name])
        if name in self.aliases:
            return self.syz(self.aliases[name])
        if name in self.syz_structs:
            return self.struct([ty for _, ty, _ in self.syz_structs[name][1]], self.syz)
        raise ValueError(f"unknown type {t}")

    @staticmethod
    def struct(types, layout):
        off, max_align = 0, 1
        for t in types:
            size, align = layout(t)
            off = (off + align - 1) // align * align + size
            max_align = max(max_align, align)
        return (off + max_align - 1) // max_align * max_align, max_align


def load():
    consts, ioctls, rust_structs = parse_abi(read_abi())
    resources, aliases, syz_structs, calls = parse_desc(read(DESC))
    layout = Layout(consts, rust_structs, resources, aliases, syz_structs)
    return consts, ioctls, rust_structs, syz_structs, calls, layout


def used_consts(text):
    """Symbolic constants lite.txt uses, comments and strings left out."""
    code = "\n".join(re.sub(r'"[^"]*"', "", line) for line in text.splitlines() if not line.lstrip().startswith("#"))
    return sorted(set(re.findall(r"\b(?:[A-Z][A-Z0-9_]*[A-Z0-9]|__NR_\w+)\b", code)))


def expected_const_file():
    consts = parse_abi(read_abi())[0]
    values = dict(KERNEL_CONSTS)
    values.update(consts)
    names = used_consts(read(DESC)) + [n for n in KERNEL_CONSTS if n.startswith("__NR_")]
    lines = ["# Code generated by syz-sysgen. DO NOT EDIT.", "arches = amd64"]
    lines += [f"{n} = amd64:{values.get(n, 'undefined')}" for n in sorted(set(names))]
    return "\n".join(lines) + "\n"


class SyzkallerDescription(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        (cls.consts, cls.ioctls, cls.rust_structs, cls.syz_structs, cls.calls, cls.layout) = load()

    def test_abi_parsed(self):
        # Every LITE_IOC_* but the magic byte carries its `_IOC` comment.
        names = set(re.findall(r"pub const (LITE_IOC_\w+):", read_abi())) - {"LITE_IOC_MAGIC"}
        self.assertEqual(names, set(self.ioctls))
        self.assertGreaterEqual(len(self.ioctls), 40)

    def test_every_command_described(self):
        described = {name.split("$", 1)[1] for name, _, _ in self.calls if name.startswith("ioctl$")}
        self.assertEqual(set(self.ioctls) - described, set(), "commands without an ioctl$ entry")
        self.assertEqual(described - set(self.ioctls), set(), "ioctl$ entries of no command")

    def test_ioctl_arguments(self):
        for name, args, _ in self.calls:
            if not name.startswith("ioctl$"):
                continue
            cmd = name.split("$", 1)[1]
            kind, nr, rust_type, value = self.ioctls[cmd]
            with self.subTest(cmd=cmd):
                self.assertEqual(args[0], ("fd", "fd_lite"))
                self.assertEqual(args[1], ("cmd", f"const[{cmd}]"))
                self.assertEqual(value & 0xFF, nr)
                self.assertEqual((value >> 8) & 0xFF, 0x4C)
                self.assertEqual(value >> 30, IOC_DIR_BITS[kind])
                if rust_type is None:
                    self.assertEqual(len(args), 2)
                    continue
                self.assertEqual(len(args), 3)
                ptr, (direction, struct) = split_type(args[2][1])
                self.assertEqual(ptr, "ptr")
                self.assertEqual(direction, IOC_DIRS[kind], "direction of the _IOC encoding")
                self.assertEqual(self.syz_structs[struct][0], rust_type)
                self.assertEqual(self.layout.syz(struct)[0], (value >> 16) & 0x3FFF, "size in the command")

    def test_structs_field_for_field(self):
        self.assertGreater(len(self.syz_structs), 30)
        for name, (abi, fields) in self.syz_structs.items():
            with self.subTest(struct=name):
                self.assertIsNotNone(abi, "no `# abi: Name` comment above the struct")
                self.assertIn(abi, self.rust_structs)
                rust = self.rust_structs[abi]
                self.assertEqual(len(fields), len(rust), "field count")
                self.assertEqual([f for f, _, _ in fields], [f for f, _ in rust], "field names")
                for (field, syz_type, _), (_, rust_type) in zip(fields, rust):
                    self.assertEqual(self.layout.syz(syz_type), self.layout.rust(rust_type), f"field {field}")
                self.assertEqual(self.layout.syz(name), self.layout.rust(abi), "struct size")

    def test_out_fields_only_in_written_structs(self):
        # An (out) field is one the kernel writes back: only in _IOWR arguments.
        written = {split_type(args[2][1])[1][1] for name, args, _ in self.calls
                   if name.startswith("ioctl$") and len(args) == 3 and split_type(args[2][1])[1][0] == "inout"}
        nested = {split_type(t)[0] for s in written for _, t, _ in self.syz_structs[s][1]}
        for name, (_, fields) in self.syz_structs.items():
            if any("out" in attrs for _, _, attrs in fields):
                self.assertIn(name, written | nested, f"{name} has out fields")

    def test_constants_from_the_header(self):
        header = dict(re.findall(r"^#define (\w+) (.+)$", read(HEADER), re.M))
        for name in used_consts(read(DESC)):
            if name in KERNEL_CONSTS:
                continue
            with self.subTest(const=name):
                self.assertTrue(name in header, f"{name}: not in lite_uapi.h, where syz-extract reads it")
                self.assertIn(name, self.consts)
                self.assertNotIn("UINT", header[name], "a kernel tree has no stdint.h")
                if re.fullmatch(r"\d+", header[name]):
                    self.assertEqual(int(header[name]), self.consts[name])

    def test_const_file(self):
        self.assertEqual(read(CONST), expected_const_file(),
                         "run python3 tools/tests/test_syzkaller.py --write-const")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-const"]:
        with open(CONST, "w", encoding="utf-8") as f:
            f.write(expected_const_file())
    else:
        unittest.main()
