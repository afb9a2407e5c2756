# Source me: keeps DDS on loopback and points Fast DDS at our loopback-only shared-memory profile
# (a profile the environment already names, under either variable, is kept).
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-42}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
# POSIX sh (make's dash) has no BASH_SOURCE and $0 is the shell: then assume the repo root.
_compactinst_src="${BASH_SOURCE:-$0}"
case "$_compactinst_src" in *ros_env.sh) ;; *) _compactinst_src=./scripts/ros_env.sh ;; esac
_compactinst_root="$(cd "$(dirname "$_compactinst_src")/.." && pwd)"
# compactinst_ros/dds_env.py knows which variables each distribution reads (ROS_DISTRO).
_compactinst_profile="$_compactinst_root/config/fastdds_loopback.xml"
if _compactinst_exports="$("${COMPACTINST_PYTHON:-python3}" \
    "$_compactinst_root/compactinst_ros/dds_env.py" "$_compactinst_profile")"; then
    eval "$_compactinst_exports"
else
    echo "ros_env.sh: python3 could not run compactinst_ros/dds_env.py; set COMPACTINST_PYTHON" >&2
    return 1 2>/dev/null || exit 1
fi
unset _compactinst_src _compactinst_root _compactinst_profile _compactinst_exports
