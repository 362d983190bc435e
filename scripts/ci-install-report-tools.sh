#!/usr/bin/env bash
# Installs what the report tests need to check the reports for real: pdflatex (with booktabs,
# xcolor and TikZ) compiles report.tex, headless Chromium loads report.html. Idempotent: a
# tool already on PATH is not installed again, and `apt-get update` runs at most once.
# Debian packages (TeX Live 2022, Chromium); CI sets TABCONTAM_CI=1 so the tests fail
# rather than skip when a tool is missing.
set -euo pipefail

packages=()
# texlive-latex-base: pdflatex, LaTeX; -recommended: booktabs, xcolor; -pictures: TikZ/PGF.
if ! command -v pdflatex >/dev/null 2>&1 \
    || ! kpsewhich booktabs.sty >/dev/null 2>&1 \
    || ! kpsewhich tikz.sty >/dev/null 2>&1; then
    packages+=(texlive-latex-base texlive-latex-recommended texlive-pictures)
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    packages+=(chromium)
fi

if [ "${#packages[@]}" -eq 0 ]; then
    echo "report tools present: $(command -v pdflatex), $(command -v chromium || command -v chromium-browser)"
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "installing ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# No recommends: they pull in fonts, documentation and X stacks the tests never use.
$sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
echo "installed: $(command -v pdflatex), $(command -v chromium || command -v chromium-browser)"
