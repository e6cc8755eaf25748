#!/usr/bin/env python3
"""The public API of a crate as sorted text lines, from rustdoc's JSON (issue 22).

    public_api.py print CRATE.json [DEP.json ...]       the API, one item a line
    public_api.py needs CRATE.json                       crates CRATE re-exports items of one by one
    public_api.py check SNAPSHOT CRATE.json [DEP.json ...] [--bless [--breaking-ok]]

scripts/check_public_api.sh makes the JSON (`cargo doc` with rustdoc's `--output-format json`,
stable rustdoc with RUSTC_BOOTSTRAP) and runs `check` against crates/tegula/public-api.txt.

Every item is listed at the path a user names it by (the shortest, where it is reachable by
several; the others are `use ALIAS = PATH` lines), with its kind first: `mod`, `struct`,
`field`, `enum`, `variant`, `trait`, `fn`, `type`, `const`, `static`, `macro`, `impl`, `use`.
Functions show parameter types (not names: a rename is no API change) and return type;
methods of a generic impl end with the impl in brackets. Trait impls of public types are
listed, blanket impls from other crates are not, and of the auto traits only Send, Sync,
Unpin, UnwindSafe and RefUnwindSafe. Types are named by their public path in the crate when
they have one; the standard library's by their name (`Option`, `io::Error`); other crates'
as `crate::Name` (the defining module left out, so that a move inside a dependency is no
change here). A crate re-exported whole (`pub use tegula_ir as ir`) or a glob of another
crate's module is one line; items of another crate re-exported one by one are expanded when
that crate's JSON is given (`needs` names those crates), else one line each.

`check` diffs the lines against the snapshot, whose first line records the crate's version.
Removed or changed lines, and added lines that break users (a field of a struct with only
public fields, a variant of an enum, a required trait item, each not #[non_exhaustive] and
in an item that was already there), are breaking: they need the version bumped per semver
(0.x: the minor version) before the snapshot is refreshed with --bless, which refuses
otherwise (--breaking-ok: the version is already bumped past the last release).
"""

import difflib
import json
import re
import sys

KNOWN_FORMATS = {57}
STD_CRATES = {"std", "core", "alloc"}
AUTO_TRAITS = {"Send", "Sync", "Unpin", "UnwindSafe", "RefUnwindSafe"}
# Standard names that need their module to say which they are.
AMBIGUOUS = {"Result", "Error", "Iter", "IntoIter", "Entry", "Ordering", "Cow", "Rc", "Weak"}
HEADER = re.compile(r"^# (\S+) (\S+) public API")
MACRO_KINDS = {"macro", "proc_attribute", "proc_derive", "proc_macro"}


class Doc:
    """One crate's rustdoc JSON."""

    def __init__(self, path):
        with open(path) as f:
            d = json.load(f)
        self.index = d["index"]
        self.paths = d["paths"]
        self.ext = d["external_crates"]
        self.root = d["root"]
        self.name = self.index[str(self.root)]["name"]
        self.version = d.get("crate_version") or "0.0.0"
        self.format = d.get("format_version")
        if self.format not in KNOWN_FORMATS:
            print(f"public_api.py: {path} has rustdoc JSON format {self.format}, this script "
                  f"was written for {sorted(KNOWN_FORMATS)}; its rendering may differ",
                  file=sys.stderr)
        self.by_path = {tuple(p["path"]): int(i) for i, p in self.paths.items()
                        if p["crate_id"] == 0}

    def item(self, i):
        return self.index.get(str(i))

    def local(self, i):
        it = self.item(i)
        return it is not None and it["crate_id"] == 0

    def key(self, i):
        """The item's defining path (crate name first), the same in every crate's JSON."""
        p = self.paths.get(str(i))
        return tuple(p["path"]) if p else None

    def kind(self, i):
        p = self.paths.get(str(i))
        return p["kind"] if p else None


def inner(it):
    k = next(iter(it["inner"]))
    return k, it["inner"][k]


def attrs(it):
    out = []
    for a in it.get("attrs", []):
        if a == "non_exhaustive" or (isinstance(a, dict) and "non_exhaustive" in a):
            out.append("#[non_exhaustive]")
        elif isinstance(a, dict) and "repr" in a:
            r = a["repr"]
            parts = [{"c": "C"}.get(r["kind"], r["kind"])] if r.get("kind") and r["kind"] != "rust" else []
            parts += [r["int"]] if r.get("int") else []
            parts += [f"align({r['align']})"] if r.get("align") else []
            parts += [f"packed({r['packed']})"] if r.get("packed") else []
            if parts:
                out.append(f"#[repr({', '.join(parts)})]")
        elif isinstance(a, dict) and "other" in a:
            s = a["other"].replace(" ", "")
            if s == "#[non_exhaustive]":
                out.append("#[non_exhaustive]")
    return out


class Api:
    def __init__(self, docs):
        self.main = docs[0]
        self.docs = {d.name: d for d in docs}
        self.bindings = {}  # (doc name, id) -> set of paths
        self.lines = {}  # text -> (sort key, parent line when an addition of it breaks users)
        self.needs = set()
        self.ext_alias = {}  # another crate's item, not expanded -> the paths it has here
        self.seen = set()
        self.walk(self.main, self.main.root, (self.main.name,))
        self.canon = {n: min(ps, key=lambda p: (len(p), p)) for n, ps in self.bindings.items()}
        self.canon_paths = set(self.canon.values())
        self.canon_by_key = {}
        for (dn, i), p in sorted(self.canon.items(), key=lambda x: x[1]):
            k = self.docs[dn].key(i)
            if k is not None:
                self.canon_by_key.setdefault(k, p)
        for n in sorted(self.bindings, key=lambda n: self.canon[n]):
            c = self.canon[n]
            for p in sorted(self.bindings[n]):
                if p != c:
                    self.add(f"use {'::'.join(p)} = {'::'.join(c)}", p, 0)
            self.emit(self.docs[n[0]], n[1], c)

    # -- the tree of public paths

    def add(self, text, path, rank, parent=None):
        self.lines.setdefault(text, (("::".join(path), rank, text), parent))

    def bind(self, doc, i, path):
        self.bindings.setdefault((doc.name, i), set()).add(path)
        k, v = inner(doc.item(i))
        if k == "module":
            self.walk(doc, i, path)

    def walk(self, doc, mod, prefix):
        if (doc.name, mod, prefix) in self.seen or len(prefix) > 16:
            return
        self.seen.add((doc.name, mod, prefix))
        for c in inner(doc.item(mod))[1]["items"]:
            it = doc.item(c)
            k, v = inner(it)
            if k == "use":
                self.use(doc, v, prefix)
            elif k not in ("impl", "primitive", "extern_crate") and it["name"]:
                self.bind(doc, c, prefix + (it["name"],))

    def use(self, doc, u, prefix):
        path = prefix if u["is_glob"] else prefix + (u["name"],)
        shown = "::".join(path) + ("::*" if u["is_glob"] else "")
        t = u["id"]
        if t is not None and not doc.local(t):
            k = doc.key(t)
            if k is not None and len(k) > 1 and k[0] in self.docs and k in self.docs[k[0]].by_path:
                doc, t = self.docs[k[0]], self.docs[k[0]].by_path[k]
            elif k is not None:
                if len(k) == 1:
                    what = f"crate {k[0]}" + ("::*" if u["is_glob"] else "")
                else:
                    what = "::".join(k) + ("::*" if u["is_glob"] else f" ({doc.kind(t)})")
                    if not u["is_glob"]:
                        self.ext_alias.setdefault(k, set()).add(path)
                        if doc.kind(t) not in MACRO_KINDS:
                            self.needs.add(k[0])
                self.add(f"use {shown} = {what}", path, 0)
                return
        if t is None or not doc.local(t):
            self.add(f"use {shown} = {u['source']}", path, 0)
            return
        if not u["is_glob"]:
            self.bind(doc, t, path)
        elif inner(doc.item(t))[0] == "module":
            self.walk(doc, t, prefix)
        else:  # a glob of an enum's variants
            self.add(f"use {shown} = {u['source']}::*", path, 0)

    # -- names and types

    def name(self, doc, i, written):
        n = (doc.name, i)
        if n in self.canon:
            return "::".join(self.canon[n])
        k = doc.key(i) if i is not None else None
        if k is None:
            return written.lstrip(":")
        if k in self.canon_by_key:
            return "::".join(self.canon_by_key[k])
        if k in self.ext_alias:
            return "::".join(min(self.ext_alias[k], key=lambda p: (len(p), p)))
        if k[0] == self.main.name:
            return "::".join(k)  # the crate's own, reachable by no public path
        if k[0] in STD_CRATES:
            if k[-1] in AMBIGUOUS and len(k) > 2 and (k[1], k[-1]) != ("result", "Result"):
                return f"{k[1]}::{k[-1]}"  # io::Error, fmt::Result, error::Error (the trait)
            return k[-1]
        return f"{k[0]}::{k[-1]}" if len(k) > 1 else k[0]

    def path(self, doc, p):
        return self.name(doc, p["id"], p["path"]) + self.args(doc, p.get("args"))

    def args(self, doc, a):
        if not a:
            return ""
        if a == "return_type_notation":
            return "(..)"
        if "parenthesized" in a:
            p = a["parenthesized"]
            out = "(" + ", ".join(self.ty(doc, t) for t in p["inputs"]) + ")"
            return out + (f" -> {self.ty(doc, p['output'])}" if p.get("output") else "")
        ab = a["angle_bracketed"]
        parts = [self.arg(doc, x) for x in ab["args"]]
        for c in ab.get("constraints", []):
            b = c["binding"]
            lhs = c["name"] + self.args(doc, c.get("args"))
            if "equality" in b:
                e = b["equality"]
                rhs = self.ty(doc, e["type"]) if "type" in e else self.const(e["constant"])
                parts.append(f"{lhs} = {rhs}")
            else:
                parts.append(f"{lhs}: {self.bounds(doc, b['constraint'])}")
        return f"<{', '.join(parts)}>" if parts else ""

    @staticmethod
    def const(c):
        return c.get("expr") or c.get("value") or "_"

    def arg(self, doc, x):
        if x == "infer":
            return "_"
        if "lifetime" in x:
            return x["lifetime"]
        if "type" in x:
            return self.ty(doc, x["type"])
        return self.const(x["const"])

    def ty(self, doc, t):
        if t is None:
            return "()"
        k, v = next(iter(t.items()))
        if k == "resolved_path":
            return self.path(doc, v)
        if k in ("generic", "primitive"):
            return v
        if k == "borrowed_ref":
            lt = v["lifetime"] + " " if v.get("lifetime") else ""
            return f"&{lt}{'mut ' if v['is_mutable'] else ''}{self.ty(doc, v['type'])}"
        if k == "raw_pointer":
            return f"*{'mut' if v['is_mutable'] else 'const'} {self.ty(doc, v['type'])}"
        if k == "slice":
            return f"[{self.ty(doc, v)}]"
        if k == "array":
            return f"[{self.ty(doc, v['type'])}; {v['len']}]"
        if k == "tuple":
            return "(" + ", ".join(self.ty(doc, x) for x in v) + ("," if len(v) == 1 else "") + ")"
        if k == "impl_trait":
            return "impl " + self.bounds(doc, v)
        if k == "dyn_trait":
            parts = [self.hrtb(doc, p["generic_params"]) + self.path(doc, p["trait"])
                     for p in v["traits"]]
            parts += [v["lifetime"]] if v.get("lifetime") else []
            return "dyn " + " + ".join(parts)
        if k == "function_pointer":
            return self.hrtb(doc, v["generic_params"]) + self.header(v["header"]) + "fn" + \
                self.sig(doc, v["sig"])
        if k == "qualified_path":
            self_ty = self.ty(doc, v["self_type"])
            tr = v.get("trait")
            name = v["name"] + self.args(doc, v.get("args"))
            if not tr or (self_ty == "Self" and not tr.get("path")):
                return f"{self_ty}::{name}"
            return f"<{self_ty} as {self.path(doc, tr)}>::{name}"
        if k == "pat":
            return self.ty(doc, v["type"])
        if t == "infer" or k == "infer":
            return "_"
        return f"?{k}"

    def bounds(self, doc, bs):
        out = []
        for b in bs:
            if "trait_bound" in b:
                tb = b["trait_bound"]
                m = {"maybe": "?", "maybe_const": "~const "}.get(tb.get("modifier"), "")
                out.append(self.hrtb(doc, tb.get("generic_params", [])) + m +
                           self.path(doc, tb["trait"]))
            elif "outlives" in b:
                out.append(b["outlives"])
            elif "use" in b:
                out.append("use<" + ", ".join(
                    x.get("lifetime") or x.get("param") if isinstance(x, dict) else str(x)
                    for x in b["use"]) + ">")
        return " + ".join(out)

    def hrtb(self, doc, params):
        return f"for<{', '.join(self.param(doc, p) for p in params)}> " if params else ""

    def param(self, doc, p):
        k, v = next(iter(p["kind"].items()))
        if k == "lifetime":
            return p["name"] + (": " + " + ".join(v["outlives"]) if v.get("outlives") else "")
        if k == "type":
            s = p["name"] + (": " + self.bounds(doc, v["bounds"]) if v["bounds"] else "")
            return s + (f" = {self.ty(doc, v['default'])}" if v.get("default") else "")
        s = f"const {p['name']}: {self.ty(doc, v['type'])}"
        return s + (f" = {v['default']}" if v.get("default") else "")

    def generics(self, doc, g):
        ps = [self.param(doc, p) for p in g["params"]
              if not p["kind"].get("type", {}).get("is_synthetic")]
        return f"<{', '.join(ps)}>" if ps else ""

    def where(self, doc, g):
        out = []
        for w in g["where_predicates"]:
            if "bound_predicate" in w:
                b = w["bound_predicate"]
                out.append(self.hrtb(doc, b.get("generic_params", [])) + self.ty(doc, b["type"]) +
                           ": " + self.bounds(doc, b["bounds"]))
            elif "lifetime_predicate" in w:
                b = w["lifetime_predicate"]
                out.append(b["lifetime"] + ": " + " + ".join(b["outlives"]))
            elif "eq_predicate" in w:
                b = w["eq_predicate"]
                rhs = b["rhs"]
                rhs = self.ty(doc, rhs["type"]) if "type" in rhs else self.const(rhs["constant"])
                out.append(f"{self.ty(doc, b['lhs'])} = {rhs}")
        return " where " + ", ".join(out) if out else ""

    @staticmethod
    def header(h):
        s = "const " if h.get("is_const") else ""
        s += "async " if h.get("is_async") else ""
        s += "unsafe " if h.get("is_unsafe") else ""
        abi = h.get("abi", "Rust")
        if abi != "Rust":
            name, unwind = (next(iter(abi.items())) if isinstance(abi, dict) else (abi, {}))
            if isinstance(unwind, dict) and unwind.get("unwind"):
                name += "-unwind"
            s += f'extern "{name}" '
        return s

    def sig(self, doc, s):
        ps = []
        for n, t in s["inputs"]:
            if n == "self":
                if t == {"generic": "Self"}:
                    ps.append("self")
                    continue
                r = t.get("borrowed_ref")
                if r and r["type"] == {"generic": "Self"}:
                    lt = r["lifetime"] + " " if r.get("lifetime") else ""
                    ps.append(f"&{lt}{'mut ' if r['is_mutable'] else ''}self")
                    continue
                ps.append(f"self: {self.ty(doc, t)}")
            else:
                ps.append(self.ty(doc, t))
        if s.get("is_c_variadic"):
            ps.append("...")
        out = s.get("output")
        return f"({', '.join(ps)})" + (f" -> {self.ty(doc, out)}" if out is not None else "")

    def fn(self, doc, f, path):
        return (self.header(f["header"]) + "fn " + "::".join(path) + self.generics(doc, f["generics"])
                + self.sig(doc, f["sig"]) + self.where(doc, f["generics"]))

    # -- the lines of one item

    def emit(self, doc, i, path):
        it = doc.item(i)
        k, v = inner(it)
        p = "::".join(path)
        pre = "".join(a + " " for a in attrs(it))
        if k == "module":
            self.add(f"mod {p}", path, 0)
        elif k in ("struct", "union"):
            exhaustive = "#[non_exhaustive]" not in pre
            g = self.generics(doc, v["generics"]) + self.where(doc, v["generics"])
            kind = v.get("kind", {"plain": {"fields": v.get("fields", []),
                                            "has_stripped_fields": v.get("has_stripped_fields")}})
            if kind == "unit":
                line = f"{pre}{k} {p}{g};"
            elif "tuple" in kind:
                fs = [self.ty(doc, inner(doc.item(f))[1]) if f is not None else "_"
                      for f in kind["tuple"]]
                line = f"{pre}{k} {p}{g}({', '.join(fs)})"
            else:
                pl = kind["plain"]
                line = f"{pre}{k} {p}{g}" + (" { /* private fields */ }"
                                             if pl["has_stripped_fields"] else "")
                exhaustive = exhaustive and not pl["has_stripped_fields"] and k == "struct"
                for f in pl["fields"]:
                    fi = doc.item(f)
                    self.add(f"field {p}::{fi['name']}: {self.ty(doc, inner(fi)[1])}", path, 1,
                             line if exhaustive else None)
            self.add(line, path, 0)
            self.impls(doc, v["impls"], path)
        elif k == "enum":
            line = f"{pre}enum {p}" + self.generics(doc, v["generics"]) + \
                self.where(doc, v["generics"])
            exhaustive = "#[non_exhaustive]" not in pre
            self.add(line, path, 0)
            for vid in v["variants"]:
                self.variant(doc, doc.item(vid), path, line if exhaustive else None)
            self.impls(doc, v["impls"], path)
        elif k == "function":
            self.add(self.fn(doc, v, path), path, 0)
        elif k == "trait":
            head = ("unsafe " if v["is_unsafe"] else "") + ("auto " if v["is_auto"] else "")
            line = f"{pre}{head}trait {p}" + self.generics(doc, v["generics"])
            line += (": " + self.bounds(doc, v["bounds"]) if v["bounds"] else "")
            line += self.where(doc, v["generics"])
            line += "" if v.get("is_dyn_compatible", True) else " (not dyn compatible)"
            self.add(line, path, 0)
            for t in v["items"]:
                self.assoc(doc, doc.item(t), path, line)
            for im in v.get("implementations", []):
                self.impl(doc, im, None)
        elif k == "type_alias":
            self.add(f"type {p}{self.generics(doc, v['generics'])}{self.where(doc, v['generics'])}"
                     f" = {self.ty(doc, v['type'])}", path, 0)
        elif k == "constant":
            self.add(f"const {p}: {self.ty(doc, v['type'])}", path, 0)
        elif k == "static":
            self.add(f"{'unsafe ' if v.get('is_unsafe') else ''}static "
                     f"{'mut ' if v['is_mutable'] else ''}{p}: {self.ty(doc, v['type'])}", path, 0)
        elif k == "macro":
            self.add(f"macro {p}!", path, 0)
        elif k == "proc_macro":
            self.add(f"macro {p} ({v['kind']})", path, 0)
        else:
            self.add(f"{k} {p}", path, 0)

    def variant(self, doc, it, path, parent):
        v = inner(it)[1]
        s = f"variant {'::'.join(path)}::{it['name']}"
        kind = v["kind"]
        if isinstance(kind, dict) and "tuple" in kind:
            s += "(" + ", ".join(self.ty(doc, inner(doc.item(f))[1]) if f is not None else "_"
                                 for f in kind["tuple"]) + ")"
        elif isinstance(kind, dict) and "struct" in kind:
            fs = [f"{doc.item(f)['name']}: {self.ty(doc, inner(doc.item(f))[1])}"
                  for f in kind["struct"]["fields"]]
            fs += [".."] if kind["struct"]["has_stripped_fields"] else []
            s += " { " + ", ".join(fs) + " }"
        if v.get("discriminant"):
            s += " = " + v["discriminant"]["expr"]
        self.add(f"{''.join(a + ' ' for a in attrs(it))}{s}", path, 1, parent)

    def assoc(self, doc, it, path, parent, context=""):
        """An item of a trait (parent: the trait's line) or of an inherent impl."""
        k, v = inner(it)
        full = path + (it["name"],)
        p = "::".join(full)
        required = False
        if k == "function":
            s = self.fn(doc, v, full)
            if parent is not None:
                required = not v["has_body"]
                s += " (required)" if required else " (provided)"
        elif k == "assoc_const":
            s = f"const {p}: {self.ty(doc, v['type'])}"
            required = parent is not None and v.get("value") is None
        elif k == "assoc_type":
            s = f"type {p}{self.generics(doc, v['generics'])}"
            s += f": {self.bounds(doc, v['bounds'])}" if v["bounds"] else ""
            s += f" = {self.ty(doc, v['type'])}" if v.get("type") else ""
            s += self.where(doc, v["generics"])
            required = parent is not None and not v.get("type")
        else:
            s = f"{k} {p}"
        self.add(s + context, path, 2, parent if required else None)

    def impls(self, doc, ids, path):
        for im in ids:
            self.impl(doc, im, path)

    def impl(self, doc, im, path):
        """A trait impl as one line; an inherent impl's public items (path: the type's)."""
        v = inner(doc.item(im))[1]
        if v.get("blanket_impl") is not None and path is not None:
            return  # a blanket impl from the type's side: std's and dependencies' (From<T>, Any)
        tr = v.get("trait")
        if v.get("is_synthetic") and (not tr or tr["path"].split("::")[-1] not in AUTO_TRAITS):
            return
        g = v["generics"]
        if tr is None:
            if path is None:
                return
            ctx = ""
            if g["params"] or g["where_predicates"] or self.ty(doc, v["for"]) != "::".join(path):
                ctx = f"  [impl{self.generics(doc, g)} {self.ty(doc, v['for'])}{self.where(doc, g)}]"
            for t in v["items"]:
                it = doc.item(t)
                if it is not None and it.get("visibility") == "public":
                    self.assoc(doc, it, path, None, ctx)
            return
        for_ty = self.ty(doc, v["for"])
        line = ("unsafe " if v["is_unsafe"] else "") + "impl" + self.generics(doc, g) + " " + \
            ("!" if v["is_negative"] else "") + self.path(doc, tr) + " for " + for_ty + \
            self.where(doc, g)
        # Listed under the first of the crate's items it names: the type, the trait, an argument.
        owner = None
        for rp in [v["for"].get("resolved_path") if isinstance(v["for"], dict) else None, tr] + \
                list(resolved_paths(tr.get("args"))):
            if rp:
                n = tuple(self.name(doc, rp["id"], rp["path"]).split("::"))
                if n in self.canon_paths:
                    owner = n
                    break
        self.add(line, owner or tuple(self.name(doc, tr["id"], tr["path"]).split("::")), 3)

    def text(self):
        return [t for t, _ in sorted(self.lines.items(), key=lambda x: x[1][0])]


def resolved_paths(t):
    """The resolved paths inside a JSON type tree, in order."""
    if isinstance(t, dict):
        if "resolved_path" in t:
            yield t["resolved_path"]
        for v in t.values():
            yield from resolved_paths(v)
    elif isinstance(t, list):
        for v in t:
            yield from resolved_paths(v)


def header(name, version):
    return (f"# {name} {version} public API: scripts/check_public_api.sh checks it, "
            f"--bless refreshes it (semver: README.md, \"Releasing\")")


def lines(n):
    return f"{n} line" + ("" if n == 1 else "s")


def semver(v):
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", v)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def bumped_enough(old, new):
    """Whether `new` may break what `old` offered: a new major, or a new minor for 0.x, or any
    new version for 0.0.x."""
    o, n = semver(old), semver(new)
    if o[0] > 0:
        return n[0] > o[0]
    if o[1] > 0:
        return n[:2] > o[:2]
    return n > o


def check(snapshot, api, bless, breaking_ok):
    name, version = api.main.name, api.main.version
    new = api.text()
    try:
        with open(snapshot) as f:
            old_all = f.read().splitlines()
    except FileNotFoundError:
        old_all = None
    missing = old_all is None
    old_all = old_all or []
    m = HEADER.match(old_all[0]) if old_all else None
    old_version = m.group(2) if m else None
    old = [l for l in old_all[1:] if l] if m else []
    old_set, new_set = set(old), set(new)
    removed = [l for l in old if l not in new_set]
    added = [l for l in new if l not in old_set]
    breaking_adds = [l for l in added if api.lines[l][1] in old_set]
    breaking = bool(removed or breaking_adds) and old_version is not None
    needs_bump = breaking and not bumped_enough(old_version, version)
    what = " and ".join(
        ([f"{lines(len(removed))} removed or changed"] if removed else []) +
        ([f"{lines(len(breaking_adds))} added, breaking users (a field of a struct with only "
          f"public fields, an enum variant, a required trait item)"] if breaking_adds else []))
    bump = (f"bump the {'major' if semver(old_version or '0')[0] > 0 else 'minor'} version "
            f"([workspace.package] version and [workspace.dependencies] in Cargo.toml; "
            f"README.md, \"Releasing\")")
    if bless:
        if needs_bump and not breaking_ok:
            print(f"public API of {name}: {what}, a breaking change, and the version is still "
                  f"{version}, the snapshot's: {bump}, then --bless again (--bless "
                  f"--breaking-ok if {version} is already bumped past the last release)",
                  file=sys.stderr)
            return 1
        with open(snapshot, "w") as f:
            f.write("\n".join([header(name, version)] + new) + "\n")
        print(f"{snapshot}: {lines(len(new))} for {name} {version} "
              f"({len(added)} added, {len(removed)} removed)")
        return 0
    if not removed and not added and old_version == version:
        print(f"public API of {name} {version}: {lines(len(new))}, as in {snapshot}")
        return 0
    diff = list(difflib.unified_diff(old, new, snapshot, f"{name} {version} (generated)",
                                     n=0, lineterm="")) if old_version else []
    diff = [l for l in diff if not l.startswith("@@")]
    if diff:
        print("\n".join(diff[:80]))
    if len(diff) > 80:
        print(f"... and {len(diff) - 80} more lines")
    refresh = "refresh the snapshot with scripts/check_public_api.sh --bless"
    print(f"public API of {name} differs from {snapshot}:", end=" ")
    if old_version is None:
        print(f"it {'does not exist' if missing else 'has no header line'}; {refresh}.")
    elif breaking and needs_bump:
        print(f"{what}: a breaking change, which needs the version bumped per semver (0.x: the "
              f"minor version), and the version is still {version}, the snapshot's: {bump}, "
              f"then {refresh}.")
    elif breaking:
        print(f"{what}: a breaking change, and the version is bumped ({old_version} -> "
              f"{version}) as semver asks: {refresh}.")
    elif added:
        print(f"{lines(len(added))} added, nothing removed: not breaking; {refresh}.")
    else:
        print(f"the API is the same, the version is not ({old_version} -> {version}); {refresh}.")
    return 1


def main(argv):
    if len(argv) < 2 or argv[0] not in ("print", "needs", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], [a for a in argv[1:] if not a.startswith("--")]
    flags = {a for a in argv[1:] if a.startswith("--")}
    unknown = flags - {"--bless", "--breaking-ok"}
    if unknown or (flags and cmd != "check"):
        print(f"public_api.py: unknown option {' '.join(sorted(unknown or flags))}", file=sys.stderr)
        return 2
    snapshot = args.pop(0) if cmd == "check" else None
    api = Api([Doc(p) for p in args])
    if cmd == "needs":
        print("\n".join(sorted(api.needs - set(api.docs))))
        return 0
    if cmd == "print":
        print("\n".join([header(api.main.name, api.main.version)] + api.text()))
        return 0
    return check(snapshot, api, "--bless" in flags, "--breaking-ok" in flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
