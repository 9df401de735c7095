#!/bin/sh
# Build the side-by-side driver (driver.cpp) against an msSanitizer source tree: its record framework and its
# detectors (memcheck, racecheck; initcheck is memcheck's shadow), nothing of its tool process, hooks or plugin.
#
#   benchmarks/mssanitizer_driver/build.sh MSSANITIZER_SOURCE BUILD_DIR     -> BUILD_DIR/mssanitizer_driver
#
# g++ -O2 -std=c++11 as msSanitizer's release build (cmake/options.cmake), one file at a time (objects already newer
# than their source are kept). Two submodules the mirror lacks are stood in for by stubs/ (securec.h: memset_s and
# friends; nlohmann/json.hpp: a name only), and call_stack.cpp (llvm-symbolizer over the kernel ELF) by
# call_stack_stub.cpp: reports carry no call stack.
set -eu
SRC=$(cd "$1/csrc" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
CXX=${CXX:-g++}
FLAGS="-std=c++11 -O2 -fno-strict-aliasing -w -pthread"
FLAGS="$FLAGS -D__MSSANITIZER_COMMIT_REVISION__=\"side-by-side\" -D__MSSANITIZER_BUILD_DATE__=\"\" -D__PACKAGE_VERSION__=\"\""
INCLUDES="-I$HERE/stubs -I$SRC -I$SRC/core/framework -I$SRC/include -I$SRC/address_sanitizer -I$SRC/race_sanitizer"
INCLUDES="$INCLUDES -I$SRC/race_sanitizer/alg_framework -I$SRC/core/framework/utility"

SOURCES=""
for f in "$SRC"/core/framework/*.cpp "$SRC"/core/framework/utility/*.cpp "$SRC"/address_sanitizer/*.cpp \
         "$SRC"/race_sanitizer/*.cpp "$SRC"/race_sanitizer/alg_framework/*.cpp; do
    case "$(basename "$f")" in
        # the tool process (socket, command loop, child launch) and the symbolizer: not the detectors
        call_stack.cpp|command.cpp|process.cpp|communication.cpp|domain_socket.cpp|thread_manager.cpp) continue ;;
    esac
    SOURCES="$SOURCES $f"
done
SOURCES="$SOURCES $HERE/call_stack_stub.cpp $HERE/driver.cpp"

compile() {  # $1 source -> object path on stdout
    obj="$OUT/obj/$(echo "$1" | sed "s|^$SRC/||; s|^$HERE/|driver/|; s|/|_|g; s|\.cpp$|.o|")"
    mkdir -p "$OUT/obj"
    if [ ! -f "$obj" ] || [ "$1" -nt "$obj" ]; then
        $CXX $FLAGS '-D__FILENAME__="'"$(basename "$1")"'"' $INCLUDES -c "$1" -o "$obj"
    fi
    echo "$obj"
}

OBJECTS=""
for f in $SOURCES; do
    OBJECTS="$OBJECTS $(compile "$f")"
done
$CXX -O2 -pthread -o "$OUT/mssanitizer_driver" $OBJECTS -ldl
echo "$OUT/mssanitizer_driver"
