#include "daemon/daemon_log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>

#include "daemon/option_spec.h"

namespace kvfs::daemon {

Result<std::string> CheckLogDestination(std::string_view value) {
  if (value.empty()) return Status::Error(EINVAL, "not syslog, stderr or a file's path");
  if (value == "syslog" || value == "stderr") return std::string(value);
  return AbsolutePath(value);
}

Result<DaemonLog> DaemonLog::Start(const LogOptions& options) {
  DaemonLog log;
  log.options_ = options;
  log.sinks_ = std::make_shared<spdlog::sinks::dist_sink_mt>();
  log.sinks_->add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  const std::string& dest = options.destination;
  if (dest != "syslog" && dest != "stderr") {
    try {
      log.file_ = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dest, /*truncate=*/false);
    } catch (const spdlog::spdlog_ex& e) {
      return Status::Error(errno != 0 ? errno : EIO, "log=" + dest + ": " + e.what());
    }
    log.sinks_->add_sink(log.file_);
  }
  auto logger = std::make_shared<spdlog::logger>("kvfs", log.sinks_);
  logger->set_level(options.level);
  // A file is read by someone after the fact, perhaps after a crash: every
  // line reaches it at once. Elsewhere warnings and worse flush at once.
  logger->flush_on(log.file_ ? spdlog::level::trace : spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return log;
}

void DaemonLog::Detach(fuse::Detacher& detacher) {
  const std::string& dest = options_.destination;
  if (dest == "syslog") {
    sinks_->set_sinks({std::make_shared<spdlog::sinks::syslog_sink_mt>(
        "kvfs", LOG_PID, LOG_DAEMON, /*enable_formatting=*/false)});
    detacher.Ready();
    return;
  }
  if (dest == "stderr") {
    // Ready() points stderr at /dev/null; the log keeps the original.
    int kept = dup(STDERR_FILENO);
    detacher.Ready();
    if (kept >= 0) {
      dup2(kept, STDERR_FILENO);
      close(kept);
    }
    return;
  }
  sinks_->set_sinks({file_});  // stderr is /dev/null from here on
  detacher.Ready();
}

}  // namespace kvfs::daemon
