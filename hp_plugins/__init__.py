"""The built-in plugins of hp-planner, registered through the same hooks a third party uses."""
