"""Training: synthetic scenes, COCO-format data loading, matching, losses and the training loop.

Imports torch; never imported by the runtime (pipeline, backends, ROS node).
"""
