// Where the daemon's log lines go (-o log=, -o log_level=):
//   syslog (default)  standard error while in the foreground or starting;
//                     syslog(3) (identity kvfs, LOG_DAEMON) once in the
//                     background;
//   stderr            standard error, also in the background: the daemon
//                     keeps the stderr it was started with (a service
//                     manager's pipe to its journal) instead of /dev/null;
//   PATH              appended to the file PATH (made if missing, each line
//                     flushed), in the background too, so warnings survive
//                     on a machine without syslog; standard error as well
//                     while in the foreground or starting.
//
//   KVFS_ASSIGN_OR_RETURN(DaemonLog log, DaemonLog::Start(options.log));
//   ... Detacher::Fork(), open, mount ...
//   log.Detach(detacher);   // instead of detacher.Ready()
//
// Thread safety: Start() and Detach() from main's thread; logging (spdlog's
// default logger) from any thread.
#pragma once

#include <spdlog/common.h>
#include <spdlog/sinks/dist_sink.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "fuse/detach.h"

namespace kvfs::daemon {

struct LogOptions {
  spdlog::level::level_enum level = spdlog::level::info;
  std::string destination = "syslog";  // "syslog", "stderr" or an absolute path
};

// For -o log=: "syslog", "stderr", or a path made absolute against the
// current directory (the daemon changes to / in the background). EINVAL for
// an empty value.
Result<std::string> CheckLogDestination(std::string_view value);

class DaemonLog {
 public:
  // Installs spdlog's default logger ("kvfs") at options.level, writing to
  // standard error and, for a path, to that file, opened now so that a
  // file that cannot be written fails the command (the error names it).
  static Result<DaemonLog> Start(const LogOptions& options);

  // Goes to the background: points the log at its background destination
  // (see the top of the file), then detacher.Ready() (the command exits 0,
  // stdio goes to /dev/null), keeping standard error for log=stderr.
  void Detach(fuse::Detacher& detacher);

 private:
  DaemonLog() = default;
  LogOptions options_;
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sinks_;
  spdlog::sink_ptr file_;  // log=PATH
};

}  // namespace kvfs::daemon
