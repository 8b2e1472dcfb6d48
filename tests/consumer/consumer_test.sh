#!/usr/bin/env bash
# Builds tests/consumer/consumer.cpp against encore as a user would and runs it.
#   consumer_test.sh installed  BUILD_ROOT SOURCE_ROOT
#     meson install of BUILD_ROOT into a temporary prefix (--destdir), then the
#     program built with a plain `g++ $(pkg-config --cflags --libs encore)`,
#     with `--static`, and by its own meson project finding encore.pc.
#   consumer_test.sh subproject BUILD_ROOT SOURCE_ROOT
#     the program's meson project with encore in its subprojects/ (a link to
#     SOURCE_ROOT), built from scratch (CPU only, unoptimised: quick to build).
set -euo pipefail
mode=$1 build_root=$2 source_root=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
consumer="$source_root/tests/consumer"
# Set by tests/meson.build in a sanitized build: the installed library is
# instrumented (the subproject mode builds its own copy, not instrumented).
sanitize=${ENCORE_CONSUMER_SANITIZE:-}
san_flags=() san_meson=()
if [ -n "$sanitize" ]; then san_flags=("-fsanitize=$sanitize"); san_meson=("-Db_sanitize=$sanitize"); fi

run() { echo "+ $*"; "$@"; }

case "$mode" in
  installed)
    run meson install -C "$build_root" --no-rebuild --quiet --destdir "$tmp/root"
    pc=$(find "$tmp/root" -name encore.pc)
    [ -n "$pc" ] || { echo "meson install put no encore.pc in the prefix"; exit 1; }
    # encore.pc is relocatable: it finds the prefix from its own place.
    export PKG_CONFIG_PATH="$(dirname "$pc")"
    run pkg-config --cflags --libs encore
    run g++ -std=c++20 -O1 "${san_flags[@]}" "$consumer/consumer.cpp" -o "$tmp/consumer_gxx" \
        $(pkg-config --cflags --libs encore)
    run "$tmp/consumer_gxx"
    run g++ -std=c++20 -O1 "${san_flags[@]}" "$consumer/consumer.cpp" -o "$tmp/consumer_static" \
        $(pkg-config --static --cflags --libs encore)
    run "$tmp/consumer_static"
    # consumer.cpp pulls only the objects it calls; every object of each
    # installed library must link with the flags its .pc gives too (a
    # program calling encore::dist or the profiler needs no flag of its own).
    libdir=$(dirname "$(dirname "$pc")")
    echo 'int main() { return 0; }' > "$tmp/main.cpp"
    for pair in encore:libencore.a encore-profile:libencore_profile.a; do
      module=${pair%%:*} lib=$libdir/${pair#*:}
      [ -f "$lib" ] || { echo "meson install put no $lib in the prefix"; exit 1; }
      for static in "" --static; do
        run g++ -std=c++20 "${san_flags[@]}" "$tmp/main.cpp" -o "$tmp/whole_archive" \
            -Wl,--whole-archive "$lib" -Wl,--no-whole-archive $(pkg-config $static --cflags --libs "$module")
      done
    done
    run meson setup "$tmp/build" "$consumer" --wrap-mode=nofallback "${san_meson[@]}" >/dev/null
    run ninja -C "$tmp/build" >/dev/null
    run "$tmp/build/consumer"
    ;;
  subproject)
    mkdir -p "$tmp/project/subprojects"
    cp "$consumer/meson.build" "$consumer/consumer.cpp" "$tmp/project/"
    ln -s "$source_root" "$tmp/project/subprojects/encore"
    run meson setup "$tmp/build" "$tmp/project" -Dbuildtype=plain --force-fallback-for=encore >/dev/null
    run ninja -C "$tmp/build" consumer >/dev/null
    run "$tmp/build/consumer"
    ;;
  *) echo "usage: consumer_test.sh installed|subproject BUILD_ROOT SOURCE_ROOT" >&2; exit 2 ;;
esac
