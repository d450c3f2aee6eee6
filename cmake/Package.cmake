# The Debian package baton_<VERSION>_<arch>.deb, made by CPack from everything `cmake --install`
# installs (scripts/package.sh runs it). Included from cmake/Install.cmake.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME baton)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "Baton")
set(CPACK_PACKAGE_CONTACT "Baton maintainers <maintainers@users.noreply.a-seed-9d0335ce.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "collective-communication daemon for GPU nodes")
# CPack installs with prefix /usr (the unit and the config then go to /lib/systemd/system and
# /etc, see Install.cmake) into a staging directory, with binaries stripped as Debian's are.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# Only the .deb: no source package, and the staging tree stays under the build directory.
set(CPACK_SOURCE_GENERATOR "")
set(CPACK_PACKAGE_DIRECTORY "${PROJECT_BINARY_DIR}")

# <name>_<version>_<arch>.deb (no Debian revision is set, so none appears in the name).
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The synopsis line is CPACK_PACKAGE_DESCRIPTION_SUMMARY; this is the rest.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "batond runs on every node of a GPU cluster and performs
collectives (all-reduce, reduce-scatter, all-gather, broadcast, reduce,
all-to-all, barrier) for the training and inference processes of that node,
which talk to it over a unix socket. The daemons plan rings and trees over
gRPC, move data over their own transports and export metrics to Prometheus.
The package holds batond, its systemd unit (not enabled), a default
/etc/baton/batond.conf, the baton command-line tool, and the client library
libbaton with its headers.")
# Depends from the binaries' (and libraries') NEEDED entries, through dpkg-shlibdeps (dpkg-dev).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file for the shared libraries the package holds (libbaton), so that packages built
# against them get a Depends on this one, at this version or later.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

# conffiles: dpkg keeps the administrator's edits on upgrade and removes the file on purge.
# The maintainer scripts only make systemd reread its units (and stop batond on removal); they
# neither enable nor start the service.
set(_baton_deb_control "${PROJECT_BINARY_DIR}/debian")
file(WRITE "${_baton_deb_control}/conffiles" "/etc/baton/batond.conf\n")
# Our own postinst and postrm replace the ones CPack writes to run ldconfig for packaged shared
# libraries; libc-bin's ldconfig trigger does that instead.
file(WRITE "${_baton_deb_control}/triggers" "activate-noawait ldconfig\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  "${_baton_deb_control}/conffiles"
  "${_baton_deb_control}/triggers"
  "${CMAKE_CURRENT_LIST_DIR}/debian/postinst"
  "${CMAKE_CURRENT_LIST_DIR}/debian/prerm"
  "${CMAKE_CURRENT_LIST_DIR}/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
