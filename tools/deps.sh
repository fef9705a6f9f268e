# Sourced by the other scripts: installs the Debian 12 packages kvfs needs,
# only those that are missing, and says so.
KVFS_PACKAGES=(
  build-essential pkg-config meson ninja-build
  libfuse3-dev fuse3 liburing-dev librocksdb-dev libspdlog-dev libgtest-dev
  libcli11-dev nlohmann-json3-dev libisal-dev libblkid-dev
  python3 python3-pytest python3-matplotlib fio e2fsprogs mandoc util-linux
  clang
)

kvfs_install_deps() {
  local missing=()
  for p in "${KVFS_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "==> all ${#KVFS_PACKAGES[@]} required packages are installed"
    return 0
  fi
  echo "==> installing missing packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: packages are missing and installing them needs root" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
