set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/opt-tiny-c4heldout-paper/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.2194583125463 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 1273.6914601197843
20 1276.8893050220329
30 1280.3430158270874
40 1282.2009579064966
e
