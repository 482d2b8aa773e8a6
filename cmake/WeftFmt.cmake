# fmt for libweft, without a run-time dependency on libfmt.so when possible.
#
# Defines the imported INTERFACE target weft_fmt (include dirs are SYSTEM) and,
# when fmt must be compiled in, WEFT_FMT_SOURCES (add them to libweft).
#   1. libfmt.a exists             -> link it (PIC required; it is hidden by --exclude-libs)
#   2. fmt 9.x headers, no archive -> compile cmake/fmt_impl.cpp into libweft (Debian 12)
#   3. otherwise                   -> link fmt::fmt (libfmt.so)
find_package(fmt REQUIRED CONFIG)
get_target_property(_weft_fmt_inc fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)

add_library(weft_fmt INTERFACE IMPORTED)
set_target_properties(weft_fmt PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_weft_fmt_inc}")
set(WEFT_FMT_SOURCES "")

find_library(WEFT_FMT_STATIC_LIBRARY NAMES libfmt.a)
if(WEFT_FMT_STATIC_LIBRARY)
  set_property(TARGET weft_fmt PROPERTY INTERFACE_LINK_LIBRARIES "${WEFT_FMT_STATIC_LIBRARY}")
  set(_weft_fmt_how "static ${WEFT_FMT_STATIC_LIBRARY}")
elseif(fmt_VERSION VERSION_GREATER_EQUAL 9 AND fmt_VERSION VERSION_LESS 10)
  set(WEFT_FMT_SOURCES "${CMAKE_CURRENT_LIST_DIR}/fmt_impl.cpp")
  set(_weft_fmt_how "compiled in (cmake/fmt_impl.cpp)")
else()
  set_property(TARGET weft_fmt PROPERTY INTERFACE_LINK_LIBRARIES fmt::fmt)
  set(_weft_fmt_how "shared libfmt.so")
endif()
message(STATUS "weft: fmt ${fmt_VERSION}, ${_weft_fmt_how}")
unset(_weft_fmt_inc)
unset(_weft_fmt_how)
