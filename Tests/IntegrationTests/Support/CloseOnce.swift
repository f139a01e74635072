import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Closes an fd the harness owns and records an issue when it was not open: a second close of the
/// same number is how one test closes another's socket (tests run in parallel, and the kernel hands
/// the lowest free number to the next `socket` or `accept`). Every close in Support goes through here.
func closeOwned(_ fd: Int32, _ owner: String) {
    guard fd >= 0 else { return }
    if Glibc.close(fd) != 0 && errno == EBADF {
        Issue.record("\(owner) closed fd \(fd), which was not open: something closed it twice")
    }
}
