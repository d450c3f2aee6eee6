#pragma once

// Abseil's Mutex checks the order in which every thread takes every lock, in the build of Abseil
// that Debian ships, and aborts the process when two locks were ever taken in both orders (a
// potential deadlock): worth it in tests, where it finds lock-order bugs before they hang
// anything, but not in a daemon that must not abort on a deadlock that did not happen, nor in
// every collective call of a rank (its lock graph was up to 7 % of the samples of a profile of
// small calls in the arena; docs/node-arena.md). ConfigureLockChecks sets the mode once per
// process from
// $BATON_DEBUG_LOCKS: "1" aborts on a cycle (the tests set it), "report" logs it, anything
// else (and unset) skips the checks. batond calls it at start, libbaton when a client connects.

namespace baton {

void ConfigureLockChecks();

}  // namespace baton
