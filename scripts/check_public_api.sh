#!/usr/bin/env bash
# The public API of the user crate `tegula` against its snapshot, crates/tegula/public-api.txt
# (issue 22), rendered one item a line by scripts/public_api.py from rustdoc's JSON. Removed or
# changed items need the version bumped per semver first; --bless refreshes the snapshot (and
# refuses a breaking change at the snapshot's version; --bless --breaking-ok when the version is
# already bumped past the last release). Needs only stable Rust and Python 3.
#
# The JSON: `cargo doc --workspace --no-deps --lib` with rustdoc's JSON output, unlocked on
# stable by RUSTC_BOOTSTRAP given to rustdoc alone (a wrapper), so that rustc's fingerprints do
# not change; the whole workspace, so that its dependencies resolve the features that the
# `cargo doc` of scripts/test.sh checks them with (`cargo rustdoc -p tegula` alone resolves
# others and checks them again, a minute or two on two cores). About 12 s beside that step.
# Cargo clears a crate's HTML documentation when it documents the crate again, here as JSON.
set -euo pipefail
cd "$(dirname "$0")/.."

target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
# At a fixed path: cargo redoes every crate's documentation when the rustdoc path changes.
wrapper="$target/public-api/rustdoc"
mkdir -p "$target/public-api"
printf '#!/bin/sh\nRUSTC_BOOTSTRAP=1 exec %s "$@"\n' "${RUSTDOC:-rustdoc}" >"$wrapper.new"
chmod +x "$wrapper.new"
cmp -s "$wrapper.new" "$wrapper" && rm "$wrapper.new" || mv "$wrapper.new" "$wrapper"
RUSTDOC="$wrapper" RUSTDOCFLAGS="-Z unstable-options --output-format json" \
  cargo doc --workspace --no-deps --lib --quiet

docs=("$target/doc/tegula.json")
# The workspace crates whose items tegula re-exports one by one (tegula::compiler's, from
# tegula-ptx): their items are listed in full.
for crate in $(python3 scripts/public_api.py needs "$target/doc/tegula.json"); do
  if [ -f "$target/doc/$crate.json" ]; then
    docs+=("$target/doc/$crate.json")
  fi
done
python3 scripts/public_api.py check crates/tegula/public-api.txt "${docs[@]}" "$@"
