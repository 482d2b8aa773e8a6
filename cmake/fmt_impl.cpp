// fmt's out-of-line implementation, compiled into libweft.
//
// Debian 12 ships fmt 9 only as libfmt.so (no libfmt.a), and the GPU machine
// may not have libfmt installed at all. Header-only fmt would recompile
// format-inl.h in every source file (~3 s each on the build machine), so it is
// compiled once here instead. cmake/WeftFmt.cmake uses this file only for fmt
// 9.x; the version script keeps every fmt symbol local to libweft.
#include <fmt/format-inl.h>

#include <locale>

FMT_BEGIN_NAMESPACE
namespace detail {
// The instantiations format.h declares `extern` (or leaves undefined) when
// FMT_HEADER_ONLY is off.
template locale_ref::locale_ref(const std::locale&);
template std::locale locale_ref::get<std::locale>() const;
template thousands_sep_result<char> thousands_sep_impl<char>(locale_ref);
template thousands_sep_result<wchar_t> thousands_sep_impl<wchar_t>(locale_ref);
template char decimal_point_impl<char>(locale_ref);
template wchar_t decimal_point_impl<wchar_t>(locale_ref);
template dragonbox::decimal_fp<float> dragonbox::to_decimal(float) noexcept;
template dragonbox::decimal_fp<double> dragonbox::to_decimal(double) noexcept;
template void buffer<char>::append(const char*, const char*);
template void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);
}  // namespace detail
FMT_END_NAMESPACE
