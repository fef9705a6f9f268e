// Lock annotations that clang's -Wthread-safety checks (tools/check.sh
// builds fs/, io/, device/ and fuse/ with it). Other compilers ignore them.
//
// The words are clang's (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html):
//   GUARDED_BY(mu)        a member read or written only with mu held
//   PT_GUARDED_BY(mu)     what a pointer member points to, likewise
//   REQUIRES(mu)          the caller holds mu (exclusively)
//   REQUIRES_SHARED(mu)   the caller holds mu, at least shared
//   EXCLUDES(mu)          the caller must not hold mu (the function takes it)
//   ACQUIRE / RELEASE     the function takes / gives back the lock
//   ACQUIRED_AFTER(mu)    the lock order: this lock is taken after mu
//   NO_THREAD_SAFETY_ANALYSIS  the function is not checked; say why beside it
#pragma once

#if defined(__clang__)
#define KVFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVFS_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) KVFS_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY KVFS_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) KVFS_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) KVFS_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) KVFS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) KVFS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) KVFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) KVFS_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) KVFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) KVFS_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) KVFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) KVFS_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) KVFS_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KVFS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TRY_ACQUIRE_SHARED(...) KVFS_THREAD_ANNOTATION(try_acquire_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) KVFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) KVFS_THREAD_ANNOTATION(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) KVFS_THREAD_ANNOTATION(assert_shared_capability(x))
#define RETURN_CAPABILITY(x) KVFS_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS KVFS_THREAD_ANNOTATION(no_thread_safety_analysis)
