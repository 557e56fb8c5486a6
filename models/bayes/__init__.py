"""The safe Bayesian learner (`SafeBayesLearner`) and its settings."""

from models.bayes.learner import MapFn, SafeBayesLearner
from models.bayes.settings import LearnerSettings

__all__ = ["LearnerSettings", "MapFn", "SafeBayesLearner"]
