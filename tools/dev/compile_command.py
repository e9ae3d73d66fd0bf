#!/usr/bin/env python3
"""Prints the compile command build/compile_commands.json holds for a source file (nothing if none).

usage (repo root): tools/dev/compile_command.py src/rollout/sampler.cpp
"""
import json
import os
import sys

want = os.path.abspath(sys.argv[1])
with open("build/compile_commands.json") as fh:
    for entry in json.load(fh):
        if os.path.abspath(entry["file"]) == want:
            print(entry["command"])
            break
