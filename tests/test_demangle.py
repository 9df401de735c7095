"""--demangle on kernel names, with the system's c++filt (and names as sent where it is missing)."""

from __future__ import annotations

import shutil

import pytest

from sanitizerd.demangle import _without_parameters, demangle
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.session import Peer, Session
from sanitizerd.sessions.work import StartKernel

MANGLED = "_ZN7kernels10add_customIfEEvPhS1_S1_"
HAS_CXXFILT = shutil.which("c++filt") is not None


class TestModes:
    def test_no_keeps_the_name(self) -> None:
        """--demangle no shows the name exactly as the client sent it."""
        assert demangle(MANGLED, "no") == MANGLED

    def test_plain_names_pass_through(self) -> None:
        """A name that is not a mangled C++ symbol is shown as sent in every mode."""
        assert [demangle("add_custom", mode) for mode in ("full", "simple", "no")] == ["add_custom"] * 3

    def test_full_and_simple(self) -> None:
        """full gives c++filt's signature and simple drops the parameters; without c++filt both show the name."""
        if HAS_CXXFILT:
            assert (
                demangle(MANGLED, "full")
                == "void kernels::add_custom<float>(unsigned char*, unsigned char*, unsigned char*)"
            )
            assert demangle(MANGLED, "simple") == "void kernels::add_custom<float>"
        else:
            assert demangle(MANGLED, "full") == demangle(MANGLED, "simple") == MANGLED

    @pytest.mark.parametrize(
        ("signature", "name"),
        [
            ("ns::f<int>(int, char*) const", "ns::f<int>"),
            ("f<std::function<void (int)>>(int)", "f<std::function<void (int)>>"),
            ("plain", "plain"),
        ],
    )
    def test_parameters_are_cut_outside_template_brackets(self, signature: str, name: str) -> None:
        """simple cuts at the first '(' that is not inside template arguments."""
        assert _without_parameters(signature) == name


class TestSession:
    def test_kernel_display_name_follows_the_config(self) -> None:
        """The session shows the kernel under its demangled name (MIX suffix dropped first)."""
        for mode in ("full", "simple", "no"):
            session = Session(1, m.Hello(version=1), m.Config(demangle=mode), Peer())
            [start] = session.handle(m.KernelBegin(kernel=1, name=MANGLED + "_mix_aiv", block_dim=1))
            assert isinstance(start, StartKernel)
            assert start.launch.name == demangle(MANGLED, mode)
