/* Stand-in for nlohmann/json (thirdparty/json, a submodule absent from the mirror): call_stack.h names the type in a
 * private declaration only; the driver replaces call_stack.cpp (call_stack_stub.cpp), so nothing parses JSON. */
#ifndef SANITIZERD_DRIVER_NLOHMANN_JSON_HPP
#define SANITIZERD_DRIVER_NLOHMANN_JSON_HPP
namespace nlohmann {
class json {};
}  // namespace nlohmann
#endif
