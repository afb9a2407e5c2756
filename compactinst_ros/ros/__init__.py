"""ROS 2 shell around the Pipeline: message conversion, QoS matching, worker thread, node.

Only this sub-package imports rclpy; it never imports torch.
"""
