#!/usr/bin/env python3
"""The layer test: every #include "..." in the library must point down the
dependency table of docs/ARCHITECTURE.md ("Layers"), never up or sideways.

    tests/layers_test.py [ROOT]        # check the tree at ROOT (default: the repository)
    tests/layers_test.py --self-test   # check that the checker catches violations

Each source file belongs to the layer of its folder; a public header
include/encore/X.h belongs to the layer that implements it (LAYER_OF_HEADER).
An include is allowed when the included file's layer is the file's own layer
or one listed for it in MAY_INCLUDE. Exit status 1 and one line per violation
(file:line, both layers, the include) otherwise. Standard, Abseil, CUDA and
other system headers (<...> or a path outside the project) are not checked.
"""
import os
import re
import sys
import tempfile

# Layer of each folder, longest prefix first wins.
LAYER_OF_FOLDER = [
    ("src/backends/cpu/", "backends/cpu"),
    ("src/backends/cuda/", "backends/cuda"),
    ("src/backends/", "backends"),
    ("src/core/", "core"),
    ("src/ops/", "ops"),
    ("src/autograd/", "autograd"),
    ("src/nn/", "nn"),
    ("src/optim/", "optim"),
    ("src/io/", "io"),
    ("src/dist/", "dist"),
    ("capture/", "capture"),
    ("profile/", "profile"),
    ("planner/", "planner"),
]

# The layer that implements each public header; encore.h includes them all.
LAYER_OF_HEADER = {
    "tensor.h": "core", "dtype.h": "core", "device.h": "core", "error.h": "core", "ref.h": "core",
    "random.h": "core",
    "ops.h": "ops",
    "autograd.h": "autograd",
    "nn.h": "nn",
    "optim.h": "optim",
    "checkpoint.h": "io", "training_checkpoint.h": "io", "progress.h": "io", "hf_gpt2.h": "io",
    "capture.h": "capture",
    "graphed.h": "capture",
    "bucketing.h": "nn",
    "dist.h": "dist",
    "profile.h": "profile",
    "planner.h": "planner",
    "encore.h": "top",
}

# What each layer may include besides itself (docs/ARCHITECTURE.md, "Layers").
# backends/cpu and backends/cuda are siblings: each sees the shared
# src/backends/ and core, never the other.
MAY_INCLUDE = {
    "core": set(),
    "backends": {"core"},
    "backends/cpu": {"backends", "core"},
    "backends/cuda": {"backends", "core"},
    # The engine accumulates gradients with ops' public functions (add, ones,
    # add_); ops record their backward through autograd's recording API.
    "autograd": {"core", "ops"},
    "ops": {"autograd", "backends", "core"},
    "nn": {"ops", "autograd", "core"},
    # Optimizers launch their fused update kernels through the backend surface.
    "optim": {"ops", "autograd", "backends", "core"},
    "io": {"nn", "optim", "ops", "autograd", "core"},
    # The process group launches its collectives as kernels (core, backends);
    # NCCL is driven on the CUDA runtime's streams; DistributedDataParallel
    # wraps nn modules and hooks autograd's gradient accumulation.
    "dist": {"nn", "ops", "autograd", "backends", "backends/cuda", "core"},
    # The CUDA executable drives stream capture through the CUDA runtime.
    "capture": {"planner", "core", "backends/cuda"},
    # CUPTI and CUDA events time replays on a GPU.
    "profile": {"capture", "planner", "core", "backends/cuda"},
    "planner": set(),
    "top": {"core", "ops", "autograd", "nn", "optim", "io", "dist", "capture", "profile", "planner"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")


def layer_of(path):
    """The layer of a project path, or None when it is not part of the library."""
    if path.startswith("include/encore/"):
        return LAYER_OF_HEADER.get(path[len("include/encore/"):], "unknown public header")
    for prefix, layer in LAYER_OF_FOLDER:
        if path.startswith(prefix):
            return layer
    return None


def resolve(include):
    """The project path an include names ("encore/x.h" lives in include/)."""
    return "include/" + include if include.startswith("encore/") else include


def allowed(src_layer, dst_layer):
    if src_layer == dst_layer:
        return True
    if dst_layer in MAY_INCLUDE.get(src_layer, set()):
        return True
    # backends/cpu and backends/cuda also see everything backends may.
    return src_layer.startswith("backends/") and dst_layer in MAY_INCLUDE["backends"]


def violations(root):
    found = []
    for folder in ["include/encore", "src", "capture", "profile", "planner"]:
        top = os.path.join(root, folder)
        if not os.path.isdir(top):
            continue
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                src_layer = layer_of(rel)
                if src_layer is None:
                    continue
                with open(full, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        dst = resolve(m.group(1))
                        dst_layer = layer_of(dst)
                        if dst_layer is None:
                            continue   # not a library file (system, generated, nlohmann ...)
                        if not allowed(src_layer, dst_layer):
                            found.append(f"{rel}:{lineno}: {src_layer} may not include {dst_layer} "
                                         f"(#include \"{m.group(1)}\")")
    return found


def self_test():
    """The checker must flag an upward include and pass a downward one."""
    cases = [
        ("src/core/a.cpp", '#include "src/backends/cuda/runtime.h"\n', True),
        ("src/backends/cuda/a.cpp", '#include "src/backends/cpu/dispatch.h"\n', True),
        ("src/backends/a.cpp", '#include "src/ops/op_utils.h"\n', True),
        ("planner/a.cpp", '#include "encore/tensor.h"\n', True),
        ("include/encore/tensor.h", '#include "encore/ops.h"\n', True),
        ("src/nn/a.cpp", '#include "src/backends/kernels.h"\n', True),
        ("src/ops/a.cpp", '#include "src/backends/kernels.h"\n#include "src/autograd/function.h"\n', False),
        ("src/backends/cuda/a.cu", '#include "src/backends/kernel_table.h"\n#include "src/core/kernel.h"\n', False),
        ("capture/a.cpp", '#include "encore/planner.h"\n#include <cuda_runtime.h>\n', False),
    ]
    failures = 0
    for path, text, bad in cases:
        with tempfile.TemporaryDirectory() as root:
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
            got = violations(root)
            if bool(got) != bad:
                failures += 1
                print(f"self-test: {path} with {text.strip()!r}: expected {'a violation' if bad else 'none'}, "
                      f"got {got}")
    return failures


def main(argv):
    if argv[1:] == ["--self-test"]:
        failures = self_test()
        print("self-test passed" if failures == 0 else f"self-test: {failures} case(s) failed")
        return 1 if failures else 0
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = violations(root)
    for v in found:
        print(v)
    print(f"{len(found)} include(s) against the layer table (docs/ARCHITECTURE.md, \"Layers\")")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
