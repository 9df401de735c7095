// The demo add kernel's "device code", for its debug information only: msop_add_client sends the ELF built from
// this file as the launch's KERNEL_BINARY, and every pc its records carry is one of the msop_pc_* labels below, so
// the call stacks sanitizerd resolves from the ELF's DWARF are those examples/add_custom.py reports.
//
// Build (tests/native_build.py does): c++ -g -O0 -c -o add_custom_kernel.o <this>
//
// Why it looks odd:
// - #line pins each frame's file and line whatever this file's own layout, with absolute names so that the
//   compile directory (a test's tmp_path) never reaches a stack;
// - the functions are always_inline, so the stacks have inlined frames (DW_TAG_inlined_subroutine) even at -O0;
// - calls go through MSOP_CALL: a call's column is that of the macro's expansion in both GCC and Clang, where a
//   plain call gets the '(' column from GCC and the callee's from Clang;
// - each label is a nop of its own, so the label's address has the label's line, and it is a symbol of the ELF, so
//   the client reads its address from the object instead of guessing the compiler's code layout;
// - ".org" puts each label at a fixed offset of .text (the gap is never run), so in the relocatable object, where
//   .text starts at 0, the pcs are the same with every compiler and examples/add_custom.py can name them.

#define MSOP_CALL(f) f()
#define MSOP_PC(name, at) __asm__ volatile(".org " #at "\n" #name ": nop")

// msSanitizer's file mapping (Location.fileNo -> file name): "<name>\0" then the u64 key, entries back to back.
__attribute__((used, section(".init_array_sanitizer_file_mapping"))) static const char msop_file_mapping[] =
    "/opt/samples/add_custom/add_custom.cpp\0"
    "\x2a\x00\x00\x00\x00\x00\x00\x00"
    "/opt/samples/add_custom/kernel_operator_data_copy_impl.h\0"
    "\x2b\x00\x00\x00\x00\x00\x00";  // the literal's own NUL is the key's last byte

#line 50 "/opt/samples/add_custom/kernel_operator_data_copy_impl.h"
__attribute__((always_inline)) inline void DataCopyImpl()
{
#line 58
        MSOP_PC(msop_pc_copy_in, 0x800);
}

#line 10 "/opt/samples/add_custom/add_custom.cpp"
class KernelAdd {
public:
    __attribute__((always_inline)) void CopyIn()
    {
#line 18
    MSOP_CALL(DataCopyImpl);
    }
    __attribute__((always_inline)) void CopyTail()
    {
#line 24
    MSOP_PC(msop_pc_pad, 0x980);
    }
    __attribute__((always_inline)) void Compute()
    {
#line 30
        MSOP_PC(msop_pc_compute, 0x880);
    }
    __attribute__((always_inline)) void CopyOut()
    {
#line 40
    MSOP_PC(msop_pc_copy_out, 0x900);
    }
};

#line 50
extern "C" __attribute__((visibility("default"))) void add_custom_kernel()
{
    KernelAdd op;
#line 54
    MSOP_CALL(op.CopyIn);
    MSOP_CALL(op.Compute);
    MSOP_CALL(op.CopyOut);
    MSOP_CALL(op.CopyTail);
}
