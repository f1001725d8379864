// The one way pulse includes cpp-httplib. Debian builds libcpp-httplib with OpenSSL, zlib and brotli
// support, and those macros change httplib's class layouts: every translation unit must see the same
// ones as the library build, or objects passed across the library boundary are laid out differently.
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>
