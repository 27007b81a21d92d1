# Shared by scripts/serve, scripts/test and scripts/build; source it, don't run it.
#
# After sourcing, the cwd is the repo root and `ensure_venv [EXTRA]` makes .venv hold the project
# installed in editable mode (with the optional-dependency group EXTRA, if given). pip only runs when
# pyproject.toml changed since the last install of that flavour: each flavour keeps a stamp file in
# .venv holding the pyproject hash it was installed from.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"

_die() {
    echo "${0##*/}: error: $*" >&2
    exit 1
}

_is_py311() {
    "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1
}

_pick_python() {
    local candidate
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && _is_py311 "$candidate"; then
            echo "$candidate"
            return
        fi
    done
    _die "Python 3.11 is required: put python3.11 (or a python3 that is 3.11) on PATH"
}

_pyproject_hash() {
    "$VENV/bin/python" -c \
        'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
        "$ROOT/pyproject.toml"
}

ensure_venv() {
    local extra="${1:-}"
    if [[ ! -x "$VENV/bin/python" ]]; then
        local python
        python="$(_pick_python)"
        echo "${0##*/}: creating .venv with $(command -v "$python")" >&2
        "$python" -m venv "$VENV" || _die "could not create .venv (on Debian/Ubuntu: apt install python3.11-venv)"
    elif ! _is_py311 "$VENV/bin/python"; then
        _die ".venv is not Python 3.11; remove it (rm -rf .venv) and rerun"
    fi

    local stamp="$VENV/.installed${extra:+-$extra}" hash spec="."
    hash="$(_pyproject_hash)"
    if [[ -f "$stamp" && "$(<"$stamp")" == "$hash" ]]; then
        return
    fi
    if [[ -n "$extra" ]]; then spec=".[$extra]"; fi
    echo "${0##*/}: installing $spec into .venv" >&2
    "$VENV/bin/python" -m pip install -q -e "$spec"
    echo "$hash" >"$stamp"
    # An install with extras also installed the base dependencies.
    echo "$hash" >"$VENV/.installed"
}
