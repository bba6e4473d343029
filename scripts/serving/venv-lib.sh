# Shared by the serving venv scripts (sourced, not run): a stamp-checked venv of its own, with uv
# and pip's find-links, so each script says only what it installs.

# venv_current VENV STAMP WANT IMPORT: true (and says so) when VENV's stamp holds WANT and IMPORT
# imports there; then the caller exits.
venv_current() {
    if [[ -f $2 && "$(cat "$2")" == "$3" && -x $1/bin/python ]] && "$1/bin/python" -c "import $4" 2>/dev/null; then
        echo "$1 is up to date ($3)"
        return 0
    fi
    return 1
}

# fresh_venv VENV UV_PIN: VENV rebuilt from scratch with uv in it; sets FIND_LINKS (uv reads no pip
# configuration, so pip's find-links, where the local wheels are, is handed over as the Makefile's
# UV macro does) and venv_started (for venv_ready's time).
fresh_venv() {
    FIND_LINKS=${PIP_FIND_LINKS:-$("$PYTHON" -m pip config get global.find-links 2>/dev/null || true)}
    venv_started=$(date +%s)
    rm -rf "$1"
    "$PYTHON" -m venv "$1"
    "$1/bin/python" -m pip install --quiet "$2"
}

# venv_ready VENV STAMP WANT: record WANT in the stamp and say how long the build took.
venv_ready() {
    echo "$3" > "$2"
    echo "$1 ready ($3) in $(( $(date +%s) - venv_started )) s"
}
