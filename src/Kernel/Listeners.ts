/**
 * Callbacks by key, for in-process fan-out (a notification channel's handlers, a run's event
 * listeners): `add` answers the function that removes the callback, and a key goes with its last
 * callback, so the map holds only keys someone listens to.
 */
export class Listeners<K, L> {
  private readonly byKey = new Map<K, Set<L>>()

  add(key: K, listener: L): () => void {
    let set = this.byKey.get(key)
    if (!set) this.byKey.set(key, set = new Set())
    set.add(listener)
    return () => {
      const set = this.byKey.get(key)
      set?.delete(listener)
      if (set?.size === 0) this.byKey.delete(key)
    }
  }

  has(key: K): boolean {
    return this.byKey.has(key)
  }

  /** The callbacks of `key` (none: empty). */
  of(key: K): Iterable<L> {
    return this.byKey.get(key) ?? []
  }

  keys(): Iterable<K> {
    return this.byKey.keys()
  }

  /** Every callback, of every key. */
  *all(): Iterable<L> {
    for (const set of this.byKey.values()) yield* set
  }
}
