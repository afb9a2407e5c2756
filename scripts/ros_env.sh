# Source me: keeps DDS on loopback and points FastDDS at our shared-memory profile.
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_LOCALHOST_ONLY=1
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-42}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
_compactinst_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$_compactinst_root/config/fastdds_shm.xml}"
