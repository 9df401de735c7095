"""--demangle on kernel names, with the system's c++filt (and names as sent where it is missing)."""

from __future__ import annotations

import shutil

import pytest

from sanitizerd.demangle import demangle, function_name, simplified
from sanitizerd.sessions.session import Peer, Session
from sanitizerd.sessions.work import StartKernel
from sanitizerd_protocol import messages as m

MANGLED = "_ZN7kernels10add_customIfEEvPhS1_S1_"
SAMPLE = "_Z15raw_hazard_demoPhS_"  # msSanitizer's example/sample_racecheck kernel
HAS_CXXFILT = shutil.which("c++filt") is not None
needs_cxxfilt = pytest.mark.skipif(not HAS_CXXFILT, reason="c++filt (binutils) is not installed")


class TestModes:
    def test_no_keeps_the_name(self) -> None:
        """--demangle no shows the name exactly as the client sent it (less a MIX suffix)."""
        assert demangle(MANGLED, "no") == MANGLED
        assert demangle(MANGLED + "_mix_aic", "no") == MANGLED

    def test_plain_names_pass_through(self) -> None:
        """A name that is not a mangled C++ name is shown as sent in every mode, without quotes."""
        assert [demangle("add_custom", mode) for mode in ("full", "simple", "no")] == ["add_custom"] * 3

    def test_empty_is_unknown(self) -> None:
        assert [demangle(name, "full") for name in ("", "_mix_aiv")] == ["unknown", "unknown"]

    @needs_cxxfilt
    def test_full_is_the_quoted_signature(self) -> None:
        """As sample_racecheck's README prints it: ``in "raw_hazard_demo(unsigned char*, unsigned char*)"``."""
        assert demangle(SAMPLE, "full") == '"raw_hazard_demo(unsigned char*, unsigned char*)"'
        assert (
            demangle(MANGLED, "full")
            == '"void kernels::add_custom<float>(unsigned char*, unsigned char*, unsigned char*)"'
        )

    @needs_cxxfilt
    def test_simple_is_the_bare_name_where_the_signature_has_a_return_type(self) -> None:
        """simple cuts the return type, template arguments and parameters; a signature with no space before its
        name (no return type) is shown whole and quoted, as msSanitizer's SimplifyDemangledName fails on it."""
        assert demangle(MANGLED, "simple") == "kernels::add_custom"
        assert demangle(SAMPLE, "simple") == '"raw_hazard_demo(unsigned char*, unsigned char*)"'

    @needs_cxxfilt
    @pytest.mark.parametrize(
        ("name", "shown"), [("ra", '"signed char restrict"'), ("i", '"int"'), ("a", '"signed char"')]
    )
    def test_short_names_demangle_as_types(self, name: str, shown: str) -> None:
        """__cxa_demangle takes a whole type too: a kernel named ``ra`` shows as msSanitizer shows it."""
        assert demangle(name, "full") == shown
        assert demangle(name, "simple") == shown  # no parameters to cut: whole
        assert demangle(name, "no") == name

    @pytest.mark.parametrize("name", ["-t", "--help", "a\nb", "x\x00y", "_Z" + "P" * 3000 + "v"])
    def test_hostile_names_are_shown_as_sent(self, name: str) -> None:
        """An option-like, multi-line, NUL-carrying or deeply nested name never reaches c++filt as an option and
        never yields several lines: it is shown as sent, or as one demangled line."""
        shown = demangle(name, "full")
        assert shown == name or (shown.startswith('"') and "\n" not in shown)

    @needs_cxxfilt
    def test_stack_functions_are_plain_signatures(self) -> None:
        """A call stack's function is demangled without quotes, and only a _Z name is (as llvm-symbolizer)."""
        assert function_name(SAMPLE) == "raw_hazard_demo(unsigned char*, unsigned char*)"
        assert function_name("ra") == "ra"

    @pytest.mark.parametrize(
        ("signature", "name"),
        [
            ("void ns::f<int>(int, char*)", "ns::f"),
            ("void f<std::function<void (int)> >(int)", "f"),
            ("f(int)", None),
            ("void plain", None),
            ("int", None),
        ],
    )
    def test_simplified_as_mssanitizer(self, signature: str, name: str | None) -> None:
        """SimplifyDemangledName: the name between the last space before the template arguments and parameters
        and them; None where there is none."""
        assert simplified(signature) == name


class TestSession:
    def test_kernel_display_name_follows_the_config(self) -> None:
        """The session shows the kernel under its demangled name (MIX suffix dropped first)."""
        for mode in ("full", "simple", "no"):
            session = Session(1, m.Hello(version=1), m.Config(demangle=mode), Peer())
            [start] = session.handle(m.KernelBegin(kernel=1, name=MANGLED + "_mix_aiv", block_dim=1))
            assert isinstance(start, StartKernel)
            assert start.launch.name == demangle(MANGLED, mode)
            if HAS_CXXFILT and mode == "full":
                assert start.launch.name.startswith('"void kernels::add_custom<float>(')
