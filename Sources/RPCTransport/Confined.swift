/// State that has one owner at a time (a serial queue, or a lock), read and written without
/// Swift's run-time exclusivity check.
///
/// A class's stored `var` is checked at run time on every access (a thread-local access set,
/// tens of instructions), and a connection, a loop or a batch touches its fields several times
/// a request. The checks guard nothing here: every field of a `Confined` is touched only by
/// its owner, and no access overlaps another one (none is held across a call that could reach
/// the same field). So the fields live behind one pointer, and an access is a load or a store.
/// This file and the store's shards are the only places that turn the check off.
///
/// Owners keep their field names: each is a computed property that yields `confined.value.x`.
public final class Confined<State> {
    @usableFromInline let pointer: UnsafeMutablePointer<State>

    @inlinable public init(_ state: State) {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: state)
    }

    deinit {
        pointer.deinitialize(count: 1)
        pointer.deallocate()
    }

    /// The state, in place. Only its owner may touch it; see the type's invariant.
    @inlinable public var value: State {
        unsafeAddress { UnsafePointer(pointer) }
        unsafeMutableAddress { pointer }
    }
}
