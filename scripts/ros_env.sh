# Source me: keeps DDS on loopback and points FastDDS at our shared-memory profile.
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_LOCALHOST_ONLY=1
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-42}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
# POSIX sh (make's dash) has no BASH_SOURCE and $0 is the shell: then assume the repo root.
_compactinst_src="${BASH_SOURCE:-$0}"
case "$_compactinst_src" in *ros_env.sh) ;; *) _compactinst_src=./scripts/ros_env.sh ;; esac
_compactinst_root="$(cd "$(dirname "$_compactinst_src")/.." && pwd)"
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$_compactinst_root/config/fastdds_shm.xml}"
