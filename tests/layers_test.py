#!/usr/bin/env python3
"""The source tree keeps its shape (docs/ARCHITECTURE.md, "Modules"): every #include between
modules points down the layers, no two modules include each other (server and jobs excepted:
one layer, the jobs run on the server), include/facecast/ holds only the public API and includes
nothing private, and no source file passes 1,000 lines. usage: layers_test.py [REPO]"""
import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
# Lower layers first; a module may include its own layer's and lower ones.
LAYERS = [
    ["core"],
    ["audio", "avatar", "converse", "media", "modelfile", "speech"],
    ["lipsync", "compose", "studio"],
    ["sched"],
    ["stream"],
    ["bulk"],
    ["server", "jobs"],
    ["cli", "bench"],
]
PEERS_MAY_CYCLE = {frozenset(("server", "jobs"))}
PUBLIC = {"error.h": "core", "picture.h": "core", "audio.h": "audio", "tts.h": "speech",
          "avatar.h": "avatar", "lipsync.h": "lipsync", "stream.h": "stream", "render.h": "stream",
          "mp4.h": "media", "server.h": "server"}
MAX_LINES = 1000

rank = {m: i for i, layer in enumerate(LAYERS) for m in layer}
fails = []


def module_of(inc, here):
    if inc.startswith("facecast/"):
        name = inc.split("/", 1)[1]
        if name not in PUBLIC:
            fails.append(f"{here}: includes {inc}, which is not a public header (add it to PUBLIC or move it)")
            return None
        return PUBLIC[name]
    return inc.split("/", 1)[0]


edges = {}
for f in sorted(glob.glob(f"{ROOT}/src/**/*.[ch]", recursive=True) + glob.glob(f"{ROOT}/src/**/*.cu", recursive=True)):
    rel = os.path.relpath(f, ROOT)
    m = rel.split("/")[1]
    text = open(f, encoding="utf-8").read()
    if f.endswith(".c") or f.endswith(".cu"):
        n = text.count("\n")
        if n > MAX_LINES:
            fails.append(f"{rel}: {n} lines (at most {MAX_LINES})")
    if m not in rank:
        fails.append(f"{rel}: module '{m}' has no layer (add it to LAYERS)")
        continue
    for inc in re.findall(r'^#include "([^"]+)"', text, re.M):
        t = module_of(inc, rel)
        if not t or t == m:
            continue
        if t not in rank:
            fails.append(f"{rel}: includes {inc} of unknown module '{t}'")
            continue
        edges.setdefault(m, {}).setdefault(t, rel)
        if rank[t] > rank[m]:
            fails.append(f"{rel}: {m} (layer {rank[m]}) includes {inc} of {t} (layer {rank[t]}): upwards")

for a, outs in edges.items():
    for b, where in outs.items():
        if a in edges.get(b, {}) and a < b and frozenset((a, b)) not in PEERS_MAY_CYCLE:
            fails.append(f"{a} and {b} include each other ({where}, {edges[b][a]})")

for h in sorted(glob.glob(f"{ROOT}/include/facecast/*.h")):
    name = os.path.basename(h)
    if name not in PUBLIC:
        fails.append(f"include/facecast/{name}: not in the public API list (move it under src/)")
    for inc in re.findall(r'^#include "([^"]+)"', open(h).read(), re.M):
        if not inc.startswith("facecast/"):
            fails.append(f"include/facecast/{name}: includes private {inc}")

for f in fails:
    print("FAIL " + f)
print(f"{len(fails)} failed" if fails else
      f"layers ok: {len(edges)} modules, {sum(len(v) for v in edges.values())} module dependencies, all downwards")
sys.exit(1 if fails else 0)
