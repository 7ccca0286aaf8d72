set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/quality/TinyStories-656K/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'TinyStories-656K'
plot 708.9919097592066 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 705.4627946586004
20 714.1172615617899
30 731.8403903026502
40 701.6802139101031
e
10 789.6174527994857
20 1051.984508995229
30 1297.1568187637718
40 2256.468133706832
e
10 724.4647660696716
20 934.9350490072858
30 1142.2962822158645
40 1725.6164534557681
e
10 704.0894821167798
20 790.1768386444588
30 840.0968281300264
40 1016.5896857611049
e
10 698.6833917632156
20 707.064563064451
30 712.049555987039
40 704.5793590431805
e
10 703.4553996666561
20 709.0312883936509
30 715.8838892927706
40 720.3208998718051
e
10 876.9262180856537
20 1141.0769459367918
30 1515.928820313672
40 2416.142482522744
e
