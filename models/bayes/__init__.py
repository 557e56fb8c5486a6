"""The safe Bayesian learner (`SafeBayesLearner`), its settings and the phases of its search; docs/learner.md."""

from models.bayes.learner import MapFn, SafeBayesLearner
from models.bayes.phase import Phase, Reopened
from models.bayes.settings import LearnerSettings

__all__ = ["LearnerSettings", "MapFn", "Phase", "Reopened", "SafeBayesLearner"]
